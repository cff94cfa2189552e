"""The fairness gate's ledger: which verdict of each version is the latest, under which policy.

An attestation (:class:`fairpca.tasks.trust.Attestation`) says what the gate once concluded
about a version; it stays valid as a signature for ever. Whether it is still the gate's word
(the version's *latest* verdict, under the policy the gate applies *now*) is what the ledger
says: a statement signed with the gate's key, the registered-model tag
``fairness.gate.ledger``, naming

* the model and the digest of the gate's current policy for it,
* a sequence number the gate increases with every ledger it signs, and when it signed it,
* for every version whose latest verdict is a pass, the digest of that attestation
  (:func:`attestation_digest`).

A pass counts only when its attestation is the one the ledger names for its version and was
signed under the ledger's policy (:func:`check_latest`). An older pass put back after a later
verdict is not named there: it is tampering. The gate keeps the ledger's content in its own
state and signs it anew at least every :data:`REFRESH_SECONDS`; a reader that cannot ask the
gate (:func:`fairpca.tasks.registry.load_champion`) refuses a ledger older than
``$FAIRPCA_GATE_LEDGER_MAX_AGE`` seconds (:data:`DEFAULT_MAX_AGE_SECONDS`), which bounds how
long a wholesale restore of older signed tags can be served.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime

from fairpca.tasks.trust import (
    Attestation,
    AttestationError,
    StaleAttestationError,
    gate_public_key,
    public_key_hex,
)

LEDGER_TAG = "fairness.gate.ledger"  # registered-model tag, signed by the gate
MAX_AGE_ENV = "FAIRPCA_GATE_LEDGER_MAX_AGE"
DEFAULT_MAX_AGE_SECONDS = 86_400
REFRESH_SECONDS = 3_600  # the gate signs a ledger anew when the published one is older
MAX_PASSES = 120  # the most recent passing versions named (a tag holds 5,000 characters)
_STATEMENT = "fairpca.gate.ledger/v1"

# The messages of the refusals below (str.format templates; tests name them, not their words)
NO_LEDGER = (
    "the gate has published no ledger for {model!r} (tag {tag}); run `fairpca gate reconcile` "
    "where the gate's worker runs"
)
NOT_A_MAX_AGE = "{env}={given!r} is not a positive number of seconds"
LEDGER_TOO_OLD = (
    "the gate's ledger was signed {age_hours:.1f} h ago, more than the {max_hours:.1f} h "
    "allowed ({env}): the gate has not confirmed its verdicts since (is its reconciler "
    "running?), or older tags were restored"
)
OLDER_THAN_THE_LEDGER = (
    "the gate's ledger names only the {count} most recent passing versions; register this "
    "model again to serve it"
)
NOT_THE_LATEST_VERDICT = (
    "its attestation is not the version's latest verdict in the gate's ledger (an older "
    "verdict put back)"
)
JUDGED_UNDER_ANOTHER_POLICY = (
    "it was judged under another gate policy (the policy file or its reference data changed "
    "since): it must pass the gate again"
)
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Ledger:
    """The gate's signed word on which passes of ``model`` count now."""

    model: str
    policy_digest: str  # of the gate's current policy for the model
    sequence: int  # increases with every ledger the gate signs for the model
    signed_at: str  # UTC, ``YYYY-MM-DDTHH:MM:SSZ``
    passes: dict[str, str] = field(default_factory=dict)  # version -> attestation digest

    def age_seconds(self, now: datetime | None = None) -> float:
        """Seconds since the gate signed it."""
        signed = datetime.strptime(self.signed_at, _TIME_FORMAT).replace(tzinfo=UTC)
        return ((now or datetime.now(UTC)) - signed).total_seconds()


def attestation_digest(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of a signed attestation's text (the gate signs
    every attestation: a registrant cannot make another one with the same digest)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _canonical(record: dict) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _statement(ledger: Ledger) -> bytes:
    """The bytes the gate signs: the ledger's fields and what kind of statement it is."""
    return _canonical({"statement": _STATEMENT, **asdict(ledger)})


def _key_id(public) -> str:
    return hashlib.sha256(bytes.fromhex(public_key_hex(public))).hexdigest()[:16]


def now_text() -> str:
    """Now, as the ledger writes times."""
    return datetime.now(UTC).strftime(_TIME_FORMAT)


def sign_ledger(ledger: Ledger, key) -> str:
    """The ledger as signed JSON text (the tag's value); the most recent
    :data:`MAX_PASSES` passing versions are kept."""
    recent = sorted(ledger.passes, key=int, reverse=True)[:MAX_PASSES]
    ledger = replace(ledger, passes={v: ledger.passes[v] for v in recent})
    signed = {"statement": _STATEMENT, **asdict(ledger), "key": _key_id(key.public_key()),
              "signature": key.sign(_statement(ledger)).hex()}  # fmt: skip
    return _canonical(signed).decode()


def verify_ledger(text: str, model: str, public_key=None) -> Ledger:
    """The ledger in ``text`` once its signature verifies and it names ``model``.

    Raises
    ------
    AttestationError
        (``tampered``) Unreadable, signed with another key, a signature that does not verify,
        or a ledger of another model.
    """
    from cryptography.exceptions import InvalidSignature

    key = public_key or gate_public_key()
    try:
        signed = json.loads(text)
        signature, key_id = bytes.fromhex(signed.pop("signature")), signed.pop("key")
        if signed.pop("statement", None) != _STATEMENT:
            raise ValueError("another statement")
        ledger = Ledger(**signed)  # its fields, no other (TypeError); the gate signs their types
        ledger.age_seconds()  # a readable time
    except (ValueError, TypeError, KeyError, AttributeError):
        raise AttestationError("the gate's ledger is unreadable", tampered=True) from None
    if key_id != _key_id(key):
        raise AttestationError("the gate's ledger is signed with another key", tampered=True)
    try:
        key.verify(signature, _statement(ledger))
    except InvalidSignature:
        raise AttestationError("the gate's ledger does not verify: written or edited by someone "
                               "other than the gate", tampered=True) from None  # fmt: skip
    if ledger.model != model:
        raise AttestationError(f"the gate's ledger is about {ledger.model!r}, copied onto this "
                               "model", tampered=True)  # fmt: skip
    return ledger


def published_ledger(model_tags: dict[str, str], model: str, public_key=None) -> Ledger:
    """The verified ledger among a registered model's tags.

    Raises
    ------
    AttestationError
        None published (not ``tampered``: the gate has not run since it began to publish
        one; ``fairpca gate reconcile`` on the gate's host publishes it), or one that does not
        verify.
    """
    text = model_tags.get(LEDGER_TAG)
    if not text:
        raise AttestationError(NO_LEDGER.format(model=model, tag=LEDGER_TAG))
    return verify_ledger(text, model, public_key)


def max_age_seconds() -> float:
    """``$FAIRPCA_GATE_LEDGER_MAX_AGE`` (seconds), else :data:`DEFAULT_MAX_AGE_SECONDS`."""
    given = os.environ.get(MAX_AGE_ENV)
    if not given:
        return DEFAULT_MAX_AGE_SECONDS
    try:
        value = float(given)
        if not value > 0:
            raise ValueError
    except ValueError:
        raise AttestationError(NOT_A_MAX_AGE.format(env=MAX_AGE_ENV, given=given[:40])) from None
    return value


def check_fresh(ledger: Ledger, max_age: float) -> None:
    """Refuse a ledger the gate signed more than ``max_age`` seconds ago (not refreshed:
    the gate is down, or older tags were restored)."""
    if (age := ledger.age_seconds()) > max_age:
        hours = {"age_hours": age / 3600, "max_hours": max_age / 3600}
        raise AttestationError(LEDGER_TOO_OLD.format(**hours, env=MAX_AGE_ENV))


def check_latest(ledger: Ledger, version: str, text: str, attestation: Attestation) -> None:
    """Refuse a verified pass (``attestation``, signed as ``text``) that is not the version's
    latest verdict in ``ledger``, or that was signed under another policy than the ledger's.

    Raises
    ------
    AttestationError
        (``tampered``) Another verdict of this version is the latest: an older pass put back.
    StaleAttestationError
        Its latest verdict, but signed under an earlier policy: to be judged again.
    """
    named = ledger.passes.get(str(version))
    full = len(ledger.passes) >= MAX_PASSES
    if named is None and full and int(version) < min(map(int, ledger.passes)):
        raise AttestationError(OLDER_THAN_THE_LEDGER.format(count=MAX_PASSES))
    if named != attestation_digest(text):
        raise AttestationError(NOT_THE_LATEST_VERDICT, tampered=True)
    if attestation.policy_digest != ledger.policy_digest:
        raise StaleAttestationError(JUDGED_UNDER_ANOTHER_POLICY)

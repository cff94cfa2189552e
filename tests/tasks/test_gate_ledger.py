"""The gate's signed ledger: which pass of a version is its latest verdict, under which
policy, and how old the gate's word is."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from messages import matching

from fairpca.tasks.gate_ledger import (
    LEDGER_TAG,
    LEDGER_TOO_OLD,
    MAX_AGE_ENV,
    MAX_PASSES,
    NO_LEDGER,
    NOT_A_MAX_AGE,
    NOT_THE_LATEST_VERDICT,
    OLDER_THAN_THE_LEDGER,
    Ledger,
    attestation_digest,
    check_fresh,
    check_latest,
    max_age_seconds,
    now_text,
    published_ledger,
    sign_ledger,
    verify_ledger,
)
from fairpca.tasks.trust import (
    Attestation,
    AttestationError,
    StaleAttestationError,
    sign_attestation,
)


@pytest.fixture(scope="module")
def key():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate()


def _attestation(verdict="passed", policy="P2", version="5") -> Attestation:
    return Attestation(model="m", version=version, model_digest="d" * 64, graph_digest="g" * 64,
                       policy_digest=policy,
                       verdict=verdict, gate_run_id="r", flow_run_id="f",
                       signed_at=now_text())  # fmt: skip


def test_a_signed_ledger_verifies_and_any_edit_is_tampering(key):
    ledger = Ledger("m", "P2", 3, now_text(), {"5": "ab" * 8})
    text = sign_ledger(ledger, key)
    assert verify_ledger(text, "m", key.public_key()) == ledger
    assert published_ledger({LEDGER_TAG: text}, "m", key.public_key()) == ledger
    edited = json.loads(text)
    edited["passes"]["6"] = "cd" * 8
    for bad, model in ((json.dumps(edited), "m"), (text, "other"), ("{", "m")):
        with pytest.raises(AttestationError) as error:
            verify_ledger(bad, model, key.public_key())
        assert error.value.tampered
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    with pytest.raises(AttestationError, match="another key"):
        verify_ledger(text, "m", Ed25519PrivateKey.generate().public_key())
    with pytest.raises(AttestationError, match=matching(NO_LEDGER, model="m")) as missing:
        published_ledger({}, "m", key.public_key())
    assert not missing.value.tampered


def test_only_the_latest_pass_under_the_ledgers_policy_counts(key):
    """v5 passed under P1, then failed under P2: the P1 pass put back is not the latest
    verdict (tampering); a latest pass under P1 while the ledger says P2 is stale."""
    old_pass = sign_attestation(_attestation(policy="P1"), key)
    ledger = Ledger("m", "P2", 7, now_text(), {})
    with pytest.raises(AttestationError, match=re.escape(NOT_THE_LATEST_VERDICT)) as put_back:
        check_latest(ledger, "5", old_pass, _attestation(policy="P1"))
    assert put_back.value.tampered
    not_yet_judged = replace(ledger, passes={"5": attestation_digest(old_pass)})
    with pytest.raises(StaleAttestationError):
        check_latest(not_yet_judged, "5", old_pass, _attestation(policy="P1"))
    current = sign_attestation(_attestation(), key)
    check_latest(replace(ledger, passes={"5": attestation_digest(current)}), "5", current,
                 _attestation())  # fmt: skip


def test_a_ledger_past_its_age_is_refused(monkeypatch):
    ledger = Ledger("m", "P", 1, "2026-01-01T00:00:00Z", {})
    with pytest.raises(AttestationError, match=matching(LEDGER_TOO_OLD, env=MAX_AGE_ENV)):
        check_fresh(ledger, max_age_seconds())
    check_fresh(replace(ledger, signed_at=now_text()), 60)
    monkeypatch.setenv(MAX_AGE_ENV, "-3")
    with pytest.raises(AttestationError, match=matching(NOT_A_MAX_AGE, given="-3")):
        max_age_seconds()


def test_a_ledger_names_the_most_recent_passes_within_a_tag(key):
    passes = {str(v): "ab" * 8 for v in range(1, 1000)}
    text = sign_ledger(Ledger("m", "P" * 64, 10**6, now_text(), passes), key)
    assert len(text) <= 5000
    kept = verify_ledger(text, "m", key.public_key()).passes
    assert len(kept) == MAX_PASSES and "999" in kept and "1" not in kept
    old = sign_attestation(_attestation(version="1"), key)
    refused = matching(OLDER_THAN_THE_LEDGER, count=MAX_PASSES)
    with pytest.raises(AttestationError, match=refused) as error:
        check_latest(Ledger("m", "P2", 1, now_text(), kept), "1", old, _attestation(version="1"))
    assert not error.value.tampered

"""Trust: what the project signs, which model files it loads, and what it never shows.

- the seal of an audit's output directory (an HMAC-SHA256 over the manifest of its files,
  keyed by a per-user secret the directory never holds);
- the one rule for the types a saved model may hold, on saving, loading and relogging
  (skops, a fixed set of trusted types, never pickle);
- the fairness gate's attestations: a verdict on one registered model version, signed with
  an Ed25519 key only the gate holds (verified with its public key), binding the digest of
  the version's model files, of its ONNX graph (what the gate judged) and of the gate's
  policy;
- credentials in tracking URIs, masked in everything written or printed;
- every written path stays inside its directory."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

# The userinfo of a URI: everything between "://" and the last "@" before the path. A regular
# expression rather than urlsplit, which refuses or misreads passwords holding "[", "#", "?".
_USERINFO = re.compile(r"(?<=://)[^/]*@")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"()<>]+")


def mask_credentials(value: str) -> str:
    """``scheme://user:password@host/...`` -> ``scheme://***@host/...`` (and without its query
    string); other text as is."""
    masked = _USERINFO.sub("***@", value, count=1)
    return value if masked == value else masked.split("?", 1)[0]


def shown_uri(value: str) -> str:
    """A URI as messages and params may show it: credentials masked
    (:func:`mask_credentials`) and no query string (a presigned URL's token)."""
    return mask_credentials(str(value)).split("?", 1)[0]


def shown_text(text: str) -> str:
    """``text`` (e.g. a library's error message) with every URI in it :func:`shown_uri`."""
    return _URI.sub(lambda match: shown_uri(match.group(0)), str(text))


# Characters that reorder the text around them when shown (Unicode bidirectional controls:
# embeddings, overrides and isolates, and the implicit marks LRM, RLM and ALM): a name
# holding U+202E reads reversed after it, so "A\u202e1 puorG" shows as "AGroup 1".
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def visible_text(text: str) -> str:
    """``text`` with every bidirectional control shown as its code point (``<U+202E>``): the
    one rule for names (groups, columns, data sets) on every surface (the report, model and
    gate cards, MLflow descriptions, Prefect artifacts, the terminal)."""
    return _BIDI_CONTROLS.sub(lambda match: f"<U+{ord(match.group(0)):04X}>", str(text))


def take_credentials(uri: str) -> str:
    """An http(s) ``uri`` without ``user:password@``; the credentials go to MLflow's env variables.

    Only MLflow's REST client reads ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``
    (HTTP basic auth), so for any other scheme (``postgresql://user:pw@db/mlflow``) the URI is
    returned as given: the database driver needs its credentials in the URI. A password in the
    environment variable ``MLFLOW_TRACKING_URI`` is removed from there for http(s).
    """
    parts = urlsplit(uri)
    no_credentials = parts.username is None and parts.password is None
    if parts.scheme.lower() not in {"http", "https"} or no_credentials:
        return uri
    if parts.username:
        os.environ["MLFLOW_TRACKING_USERNAME"] = unquote(parts.username)
    if parts.password is not None:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = unquote(parts.password)
    host = parts.netloc.rpartition("@")[2]
    clean = urlunsplit(parts._replace(netloc=host))
    if os.environ.get("MLFLOW_TRACKING_URI") == uri:
        os.environ["MLFLOW_TRACKING_URI"] = clean
    return clean


KEY_ENV = "FAIRPCA_SIGNING_KEY"
SEAL_FILE = "audit.seal.json"
# written while logging, read back by nothing that is uploaded from the directory
UNSEALED_FILES = frozenset({SEAL_FILE, "mlflow_status.json", "model_card.md"})
MAX_FILE_BYTES = 512 * 2**20  # per file relog uploads
MAX_TOTAL_BYTES = 2 * 2**30  # all files together
_MIN_KEY_CHARS = 32
_SEAL_VERSION = 1


class SealError(ValueError):
    """The directory is not the one a fairpca audit wrote and signed with this user's key."""


# The messages of the refusals below (str.format templates; tests name them, not their words)
SHORT_KEY = (
    "{env} holds {count} characters; use at least {minimum}, e.g. the output of `python -c "
    "'import secrets; print(secrets.token_hex(32))'`."
)
NO_SIGNING_KEY = (
    "no signing key at {path} (nor {env}): the directory was sealed by another user or machine. "
    "Relog it where the audit ran, or set {env} to the key it was sealed with."
)
KEY_FILE_OPEN = (
    "signing key {path} has mode {mode:04o} (owner uid {uid}); only its owner may read it. Run "
    "`chmod 600 {path}` (as its owner), or set {env}."
)
SYMBOLIC_LINK = (
    "{path} is a symbolic link; an audit directory holds only plain files. Remove it or re-run "
    "the audit."
)
NO_SEAL = (
    "{out_dir} has no {seal}: it was not written and signed by a fairpca audit, so relog does "
    "not trust it. Re-run the audit."
)
SEAL_DOES_NOT_VERIFY = (
    "{path} does not verify with this user's signing key: the seal or its manifest was edited "
    "after the audit, or another key signed it. Re-run the audit."
)
FILES_ADDED = (
    "{out_dir}: file(s) {added} were added after the audit (not in its signed manifest); relog "
    "uploads nothing else. Remove them or re-run the audit."
)
FILES_MISSING = "{out_dir}: file(s) {missing} of the signed manifest are missing."
FILE_CHANGED = (
    "{out_dir}: file {name!r} changed after the audit (its SHA-256 differs from the signed "
    "manifest); it is not logged. Re-run the audit."
)
SIZE_CHANGED = (
    "{out_dir}: file {name!r} has {size} bytes, the signed manifest {sealed}: it changed after "
    "the audit. Re-run the audit."
)
FILE_OVER_CAP = (
    "{out_dir}: file {name!r} has {mib:.0f} MiB, over relog's cap of {cap:.0f} MiB per file; it "
    "is not uploaded."
)
KEY_INSIDE_OUTPUT = (
    "the signing key {key} lies inside the output directory {out_dir}; set XDG_CONFIG_HOME (or "
    "FAIRPCA_SIGNING_KEY) so the key is kept elsewhere."
)
TOTAL_OVER_CAP = (
    "{out_dir}: the files add up to {mib:.0f} MiB, over relog's cap of {cap:.0f} MiB; nothing "
    "is uploaded."
)


def sha256_file(path: str | Path, copy_to: Path | None = None) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks (the one file hash of the project);
    with ``copy_to``, each block hashed is also written there (the copy holds exactly the
    bytes hashed, whatever happens to ``path`` meanwhile)."""
    digest = hashlib.sha256()
    with contextlib.ExitStack() as files:
        handle = files.enter_context(Path(path).open("rb"))
        copy = None if copy_to is None else files.enter_context(Path(copy_to).open("xb"))
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            if copy is not None:
                copy.write(block)
    return digest.hexdigest()


def _config_dir() -> Path:
    """``$XDG_CONFIG_HOME/fairpca`` (``~/.config/fairpca`` when unset)."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "fairpca"


def key_path() -> Path:
    """``$XDG_CONFIG_HOME/fairpca/signing.key`` (``~/.config`` when unset)."""
    return _config_dir() / "signing.key"


def signing_key(*, create: bool = False) -> bytes:
    """The per-user secret: ``$FAIRPCA_SIGNING_KEY``, else the 0600 key file.

    Parameters
    ----------
    create : bool, default=False
        Create the key file (32 random bytes, hex, mode 0600) when there is none; only an
        audit does, relog never (a directory signed elsewhere cannot be verified here).

    Raises
    ------
    SealError
        A short environment key, no key file (``create=False``), or a key file that is
        readable by others, not owned by this user, or too short.
    """
    env = os.environ.get(KEY_ENV)
    if env:
        if len(env) < _MIN_KEY_CHARS:
            raise SealError(SHORT_KEY.format(env=KEY_ENV, count=len(env), minimum=_MIN_KEY_CHARS))
        return env.encode()
    path = key_path()
    if not path.exists():
        if not create:
            raise SealError(NO_SIGNING_KEY.format(path=path, env=KEY_ENV))
        _create_key_file(path)
    return _read_key_file(path)


def _create_key_file(path: Path) -> bool:
    """Write 32 random bytes (hex) to a new file of mode 0600; False if it exists already."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another audit created it at the same moment
        return False
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    return True


def _read_key_file(path: Path, env: str = KEY_ENV, error: type[ValueError] = SealError) -> bytes:
    """The key in ``path``, refused unless only its owner (this user) may read it."""
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077 or info.st_uid != os.getuid() or not stat.S_ISREG(info.st_mode):
        raise error(KEY_FILE_OPEN.format(path=path, mode=mode, uid=info.st_uid, env=env))
    key = path.read_bytes().strip()
    if len(key) < _MIN_KEY_CHARS:
        raise error(f"signing key {path} is shorter than {_MIN_KEY_CHARS} characters.")
    return key


def _canonical(record: dict[str, Any]) -> bytes:
    """The one byte form of a record that is signed or hashed (sorted keys, no spaces)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def canonical_digest(record: dict[str, Any]) -> str:
    """Hex SHA-256 of a record's canonical bytes (what an attestation binds)."""
    return hashlib.sha256(_canonical(record)).hexdigest()


def _mac(key: bytes, record: dict[str, Any]) -> str:
    return hmac.new(key, _canonical(record), hashlib.sha256).hexdigest()


def _file_listing(out_dir: Path, skipped: frozenset[str] = UNSEALED_FILES) -> dict[str, Path]:
    """Every regular file under ``out_dir`` (posix relative path -> path) but ``skipped``."""
    files = {}
    for folder, dirs, names in os.walk(out_dir, followlinks=False):
        for name in [*dirs, *names]:
            path = Path(folder) / name
            if path.is_symlink():
                raise SealError(SYMBOLIC_LINK.format(path=path))
            relative = path.relative_to(out_dir).as_posix()
            if name in names and relative not in skipped:
                files[relative] = path
    return files


def _write_seal(out_dir: Path, record: dict[str, Any], key: bytes) -> Path:
    target = Path(out_dir) / SEAL_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({**record, "mac": _mac(key, record)}, indent=1, sort_keys=True))
    tmp.replace(target)
    return target


def seal_output_dir(
    out_dir: str | Path, known: Mapping[str, str] | None = None, *, run: Mapping | None = None
) -> dict[str, str]:
    """Sign the manifest (path, size, SHA-256) of every file of ``out_dir``, and the MLflow
    run that logs it when known; return the SHA-256s sealed (posix path inside ``out_dir``
    -> hex digest).

    The audit seals its folder twice: before any network call, and once the promotion and
    the report are written beside it, with its run (``run``: ``run_id`` and
    ``experiment_id``; a later relog completes that run and no other, :func:`bound_run`).
    The key file is created on first use. The key must not lie inside ``out_dir``.
    ``known`` holds the SHA-256s the audit computed of files it wrote and has not changed
    since (the model's and the matrices' as the record names them, or an earlier seal's):
    they are sealed as given, every other file is hashed here. A wrong one fails closed:
    whatever reads the folder later (:func:`verify_output_dir`, the copy that is uploaded)
    hashes each file again and refuses a mismatch.
    """
    out_dir = Path(out_dir)
    key = signing_key(create=True)
    if not os.environ.get(KEY_ENV) and key_path().resolve().is_relative_to(out_dir.resolve()):
        raise SealError(KEY_INSIDE_OUTPUT.format(key=key_path(), out_dir=out_dir))
    listing, known = sorted(_file_listing(out_dir).items()), known or {}
    digests = {name: known.get(name) or sha256_file(path) for name, path in listing}
    files = {name: {"size": path.stat().st_size, "sha256": digests[name]} for name, path in listing}
    bound = None if run is None else {name: str(run[name]) for name in ("run_id", "experiment_id")}
    _write_seal(out_dir, {"version": _SEAL_VERSION, "files": files, "run": bound}, key)
    return digests


def _verified_record(out_dir: Path) -> dict[str, Any]:
    """The seal's record once its MAC verifies with this user's key."""
    path = out_dir / SEAL_FILE
    if not path.is_file():
        raise SealError(NO_SEAL.format(out_dir=out_dir, seal=SEAL_FILE))
    if path.stat().st_size > 16 * 2**20:
        raise SealError(f"{path} is larger than any seal fairpca writes; it is not read.")
    try:
        sealed = json.loads(path.read_text())
        mac = sealed.pop("mac")
    except (ValueError, KeyError, AttributeError, TypeError) as error:
        raise SealError(f"{path} is not a readable seal ({error}); re-run the audit.") from error
    if not hmac.compare_digest(str(mac), _mac(signing_key(), sealed)):
        raise SealError(SEAL_DOES_NOT_VERIFY.format(path=path))
    return sealed


def verify_output_dir(
    out_dir: str | Path,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    copy_to: Path | None = None,
    contents: bool = True,
) -> dict[str, Any]:
    """Check ``out_dir`` is exactly what the audit sealed; return the verified record.

    Sizes are compared (and capped) before any file is hashed, so a huge planted file is
    refused in milliseconds. With ``copy_to`` (an empty private folder) every file is copied
    there as it is hashed: the copy is what was verified, whatever ``out_dir`` holds later.
    ``contents=False`` checks the seal, the listing and the sizes only (a quick check before
    a command's work; the contents are checked when they are copied).

    Raises
    ------
    SealError
        No seal, a MAC that does not verify, a symbolic link, a file added, missing, of
        another size or content than sealed (named), or a file or total over the caps.
    """
    out_dir = Path(out_dir)
    record = _verified_record(out_dir)
    sealed, present = record["files"], _file_listing(out_dir)
    if added := sorted(set(present) - set(sealed)):
        raise SealError(FILES_ADDED.format(out_dir=out_dir, added=added))
    if missing := sorted(set(sealed) - set(present)):
        raise SealError(FILES_MISSING.format(out_dir=out_dir, missing=missing))
    sizes = {name: present[name].stat().st_size for name in sealed}
    for name, size in sizes.items():
        if size != sealed[name]["size"]:
            raise SealError(
                SIZE_CHANGED.format(
                    out_dir=out_dir, name=name, size=size, sealed=sealed[name]["size"]
                )
            )
        if size > max_file_bytes:
            mib, cap = size / 2**20, max_file_bytes / 2**20
            raise SealError(FILE_OVER_CAP.format(out_dir=out_dir, name=name, mib=mib, cap=cap))
    if (total := sum(sizes.values())) > max_total_bytes:
        mib, cap = total / 2**20, max_total_bytes / 2**20
        raise SealError(TOTAL_OVER_CAP.format(out_dir=out_dir, mib=mib, cap=cap))
    if not contents:
        return record
    for name, entry in sealed.items():
        copy = None if copy_to is None else Path(copy_to, name)
        if copy is not None:
            copy.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if sha256_file(present[name], copy) != entry["sha256"]:
            raise SealError(FILE_CHANGED.format(out_dir=out_dir, name=name))
    return record


def bind_run(out_dir: str | Path, *, run_id: str, experiment_id: str) -> None:
    """Record (and sign) the MLflow run that logs this directory, so a later relog completes
    that run and no other (a relog's run; the audit seals its own with the folder,
    :func:`seal_output_dir`). The directory must still verify."""
    out_dir = Path(out_dir)
    record = _verified_record(out_dir)
    record["run"] = {"run_id": str(run_id), "experiment_id": str(experiment_id)}
    _write_seal(out_dir, record, signing_key())


def bound_run(record: dict[str, Any]) -> dict[str, str] | None:
    """The run a verified seal names (``run_id``, ``experiment_id``), or None."""
    run = record.get("run")
    return dict(run) if isinstance(run, dict) else None


# ---- the fairness gate's attestations ------------------------------------------------------

GATE_KEY_ENV = "FAIRPCA_GATE_KEY"  # the gate's private key (64 hex digits), else the file
GATE_KEY_FILE_ENV = "FAIRPCA_GATE_KEY_FILE"  # default $XDG_CONFIG_HOME/fairpca/gate.key
GATE_PUBLIC_KEY_ENV = "FAIRPCA_GATE_PUBLIC_KEY"  # verification only: scorers, other hosts
_STATEMENT = "fairpca.gate.attestation/v2"  # v1 bound no graph: it never passes now


class AttestationError(ValueError):
    """No valid gate attestation: missing, not verifying, or not matching what it claims.

    ``tampered`` is True when something was forged or changed after the gate judged it (a
    signature that does not verify, a statement about another version, model files other
    than the attested ones), False when the attestation is merely absent, a fail, or stale
    (judged under another policy)."""

    def __init__(self, reason: str, *, tampered: bool = False):
        super().__init__(reason)
        self.tampered = tampered


class StaleAttestationError(AttestationError):
    """A pass the gate signed for these very files under a policy that has changed since:
    honest, but to be judged again under the current policy (never tampering)."""


# The messages of the refusals below (str.format templates; tests name them, not their words)
GATE_KEY_NOT_HEX = (
    "the gate key in {where} is not 64 hexadecimal digits (32 bytes); `fairpca gate keygen` "
    "creates one and prints its public key."
)
NO_GATE_KEY = (
    "the gate holds no signing key: no {path} (nor {env}). Run `fairpca gate keygen` where the "
    "gate's worker runs (it creates the key file, mode 0600, and prints the public key for "
    "scorers)."
)
NO_VERIFYING_KEY = (
    "no key to verify the fairness gate's attestations: set {env} to the gate's public key "
    "(`fairpca gate keygen` prints it on the gate's host). ({error})"
)
ATTESTATION_UNREADABLE = "the attestation is not one the gate writes (unreadable)"
ANOTHER_SIGNING_KEY = (
    "the attestation names the signing key {named!r}, not the gate's {key!r} (forged, or signed "
    "before the gate's key changed)"
)
SIGNATURE_DOES_NOT_VERIFY = (
    "the attestation's signature does not verify: it was written or edited by someone other "
    "than the gate"
)
FILES_HOLD_A_LINK = "the model files hold a link: {error}"


@dataclass(frozen=True)
class Attestation:
    """What the gate signs about one registered model version."""

    model: str
    version: str
    model_digest: str  # :func:`files_digest` of the version's model files
    graph_digest: str  # SHA-256 of its ONNX graph, the function judged ("": none, never passes)
    policy_digest: str  # of the gate policy the version was judged under
    verdict: str  # "passed" or "failed"
    gate_run_id: str  # the MLflow run of the evaluation
    flow_run_id: str  # the Prefect flow run of the gate
    signed_at: str


def gate_key_path() -> Path:
    """``$FAIRPCA_GATE_KEY_FILE``, else ``$XDG_CONFIG_HOME/fairpca/gate.key``."""
    given = os.environ.get(GATE_KEY_FILE_ENV)
    return Path(given) if given else _config_dir() / "gate.key"


def create_gate_key() -> tuple[Path, bool]:
    """Create the gate's private key file (32 random bytes, hex, mode 0600) unless it
    exists; ``(path, created)``. Only ``fairpca gate keygen`` does, never a gate run."""
    path = gate_key_path()
    return path, _create_key_file(path)


def _ed25519(text: str, where: str, *, public: bool):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    try:
        raw = bytes.fromhex(text.strip())
        if len(raw) != 32:
            raise ValueError
    except ValueError:
        raise AttestationError(GATE_KEY_NOT_HEX.format(where=where)) from None
    return (
        Ed25519PublicKey.from_public_bytes(raw)
        if public
        else Ed25519PrivateKey.from_private_bytes(raw)
    )


def gate_signing_key():
    """The gate's Ed25519 private key: ``$FAIRPCA_GATE_KEY``, else the 0600 key file.

    Raises
    ------
    AttestationError
        No key, or a key file others may read (as for the audit's key), or not a key.
    """
    if env := os.environ.get(GATE_KEY_ENV):
        return _ed25519(env, GATE_KEY_ENV, public=False)
    path = gate_key_path()
    if not path.is_file():
        raise AttestationError(NO_GATE_KEY.format(path=path, env=GATE_KEY_ENV))
    return _ed25519(
        _read_key_file(path, GATE_KEY_ENV, AttestationError).decode(), str(path), public=False
    )


def gate_public_key():
    """The Ed25519 key attestations are verified with: ``$FAIRPCA_GATE_PUBLIC_KEY`` (hex),
    else the public half of the gate's own key (on the gate's worker).

    Raises
    ------
    AttestationError
        Neither is available.
    """
    if env := os.environ.get(GATE_PUBLIC_KEY_ENV):
        return _ed25519(env, GATE_PUBLIC_KEY_ENV, public=True)
    try:
        return gate_signing_key().public_key()
    except AttestationError as error:
        raise AttestationError(
            NO_VERIFYING_KEY.format(env=GATE_PUBLIC_KEY_ENV, error=error)
        ) from None


def public_key_hex(key) -> str:
    """The 64 hex digits of an Ed25519 public key (what scorers set)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def _key_id(public) -> str:
    return hashlib.sha256(bytes.fromhex(public_key_hex(public))).hexdigest()[:16]


def sign_attestation(attestation: Attestation, key=None) -> str:
    """The signed attestation as JSON text (a registry tag of under 1,000 characters)."""
    key = key or gate_signing_key()
    statement = {"statement": _STATEMENT, **asdict(attestation)}
    signature = key.sign(_canonical(statement)).hex()
    return _canonical(
        {**statement, "key": _key_id(key.public_key()), "signature": signature}
    ).decode()


def verify_attestation(text: str, public_key=None) -> Attestation:
    """The attestation in ``text`` once its signature verifies with the gate's public key.

    Raises
    ------
    AttestationError
        (``tampered``) Unreadable, signed with another key, or a signature that does not
        verify.
    """
    from cryptography.exceptions import InvalidSignature

    key = public_key or gate_public_key()
    fields = set(Attestation.__dataclass_fields__)
    statements = {_STATEMENT: fields, "fairpca.gate.attestation/v1": fields - {"graph_digest"}}
    try:
        signed = json.loads(text)
        signature, key_id = bytes.fromhex(signed.pop("signature")), signed.pop("key")
        if set(signed) != statements[signed.get("statement")] | {"statement"}:
            raise ValueError("another statement")
        attestation = Attestation(**{name: str(signed.get(name, "")) for name in fields})
    except (ValueError, TypeError, KeyError, AttributeError):
        raise AttestationError(ATTESTATION_UNREADABLE, tampered=True) from None
    if key_id != _key_id(key):
        raise AttestationError(
            ANOTHER_SIGNING_KEY.format(named=str(key_id)[:16], key=_key_id(key)), tampered=True
        )
    try:
        key.verify(signature, _canonical(signed))
    except InvalidSignature:
        raise AttestationError(SIGNATURE_DOES_NOT_VERIFY, tampered=True) from None
    return attestation


def files_digest(directory: str | Path) -> str:
    """SHA-256 over the manifest (relative path, SHA-256) of every file under ``directory``:
    what an attestation binds of a registered version's model.

    Raises
    ------
    AttestationError
        (``tampered``) The directory holds a symbolic link.
    """
    try:
        files = _file_listing(Path(directory), skipped=frozenset())
    except SealError as error:
        raise AttestationError(FILES_HOLD_A_LINK.format(error=error), tampered=True) from None
    return canonical_digest({name: sha256_file(path) for name, path in files.items()})


# Every type a fairpca pipeline holds beyond skops' defaults. The tests rebuild every
# variant and classifier and check this list is complete.
TRUSTED_TYPES = frozenset(
    {
        "fairpca._fair_pca.FairPCA",
        "fairpca.datasets._preprocess.RareCategoryPooler",
        "fairpca._kernel.FairKernelPCA",
        "fairpca._kernel_maps.KernelFactor",
        "fairpca._kernel_maps.KernelFunction",
        "fairpca._kernel_maps.NystroemMap",
        "numpy.dtype",
        "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
    }
)


class UntrustedModelError(RuntimeError):
    """A model file cannot be verified as one fairpca wrote; it is not loaded."""


# The messages of the refusals below (str.format templates; tests name them, not their words)
PIPELINE_TYPES_UNTRUSTED = (
    "the pipeline holds types fairpca does not trust: {foreign}; a model holding them could not "
    "be loaded again, so it is not saved (use fairpca's representations and the audit's "
    "classifiers)."
)
NOT_SKOPS = (
    "the model in {model_dir} is serialised as {serialization!r}; only 'skops' is loaded "
    "(pickle could run arbitrary code)."
)
FILE_TYPES_UNTRUSTED = "{name} holds types fairpca does not trust: {foreign}; it is not loaded."
SHA256_CHANGED = (
    "{name} has SHA-256 {actual}, not the {expected} recorded at registration: the file was "
    "changed after fairpca registered it."
)
NESTED_MLMODEL = "{model_dir} holds more than one MLmodel file ({nested})."
CARRIES_CODE = (
    "{model_dir} carries source code ({code}), which loading would run; a fairpca model depends "
    "on fairpca through a pinned requirement instead."
)
MLMODEL_TYPES_UNTRUSTED = "MLmodel lists skops_trusted_types {foreign} that fairpca does not trust."
MODEL_NOT_LOADED = (
    "the model at {shown} is not loaded: {error} Log it with mlflow.sklearn.log_model(model, ..., "
    "serialization_format='skops'), or load a model you trust yourself and pass the object "
    "(anything with predict)."
)


def foreign_types(types: Iterable[str]) -> list[str]:
    """The rule: the names in ``types`` outside :data:`TRUSTED_TYPES`, sorted."""
    return sorted({str(name) for name in types} - TRUSTED_TYPES)


def types_to_trust(pipeline) -> list[str]:
    """The types skops must be told to trust to reload ``pipeline`` (the save path).

    Raises
    ------
    TypeError
        The pipeline holds a type outside :data:`TRUSTED_TYPES`: it would be saved but never
        loaded again, so it is refused now.
    """
    import skops.io

    needed = skops.io.get_untrusted_types(data=skops.io.dumps(pipeline))
    if foreign := foreign_types(needed):
        raise TypeError(PIPELINE_TYPES_UNTRUSTED.format(foreign=foreign))
    return sorted(needed)


def skops_file(model_dir: Path) -> Path:
    """The skops file of an MLflow sklearn model directory; refuse any other format."""
    import yaml

    model_dir = Path(model_dir)
    flavor = yaml.safe_load((model_dir / "MLmodel").read_text())["flavors"].get("sklearn", {})
    serialization = flavor.get("serialization_format")
    if serialization != "skops":
        raise UntrustedModelError(
            NOT_SKOPS.format(model_dir=model_dir, serialization=serialization)
        )
    path = (model_dir / str(flavor.get("pickled_model", ""))).resolve()
    if model_dir.resolve() not in path.parents or not path.is_file():
        raise UntrustedModelError(f"the model file {flavor.get('pickled_model')!r} is missing")
    return path


def skops_file_types(path: Path) -> list[str]:
    """The types the skops file ``path`` needs trusted (read without executing anything).

    Raises
    ------
    UntrustedModelError
        One of them is outside :data:`TRUSTED_TYPES`.
    """
    import skops.io

    needed = skops.io.get_untrusted_types(file=path)
    if foreign := foreign_types(needed):
        raise UntrustedModelError(
            FILE_TYPES_UNTRUSTED.format(name=Path(path).name, foreign=foreign)
        )
    return list(needed)


def load_skops_pipeline(model_dir: Path, expected_sha256: str | None = None):
    """Load the pipeline of an MLflow sklearn model directory with skops and
    :data:`TRUSTED_TYPES`.

    Raises
    ------
    UntrustedModelError
        Not skops, a file whose SHA-256 differs from ``expected_sha256``, or a type outside
        :data:`TRUSTED_TYPES`; nothing is deserialised then.
    """
    import skops.io

    path = skops_file(Path(model_dir))
    actual = sha256_file(path)
    if expected_sha256 is not None and actual != expected_sha256:
        raise UntrustedModelError(
            SHA256_CHANGED.format(name=path.name, actual=actual, expected=expected_sha256)
        )
    return skops.io.load(path, trusted=skops_file_types(path))


def check_model_files(model_dir: Path) -> None:
    """Refuse a model directory that is not an MLflow scikit-learn model serialised with
    skops, or that holds a pickle file, code, or anything its loader would read besides
    the checked skops file.

    Nothing in the directory is loaded or executed: ``MLmodel`` is read as YAML and the
    other files only by name. Accepted: the flavors ``sklearn`` (skops, its
    ``skops_trusted_types`` within :data:`TRUSTED_TYPES`) and ``python_function`` (loader
    ``mlflow.sklearn``, reading the same file, no ``data`` folder) and, beside them, ``onnx``
    reading only the graph ``model.onnx`` (:func:`check_onnx_flavour`); no other
    ``MLmodel``, no pickle, no ``code_paths``, no ``.py`` file.

    Raises
    ------
    ValueError
        Naming what was found.
    """
    import yaml

    model_dir = Path(model_dir)
    mlmodel = model_dir / "MLmodel"
    if not mlmodel.is_file():
        raise ValueError(f"{model_dir} holds no MLmodel file; it is not a saved model.")
    try:
        spec = yaml.safe_load(mlmodel.read_text(encoding="utf-8")) or {}
        flavors = spec.get("flavors") or {}
        sklearn = flavors.get("sklearn") or {}
        pyfunc = flavors.get("python_function") or {}
        if not all(isinstance(entry, dict) for entry in (flavors, sklearn, pyfunc)):
            raise AttributeError("a flavor entry is not a mapping")
    except (yaml.YAMLError, UnicodeDecodeError, AttributeError) as error:
        raise ValueError(f"{mlmodel} is not a readable MLmodel file ({error}).") from error
    serialization = sklearn.get("serialization_format")
    if serialization != "skops":
        raise ValueError(
            f"MLmodel names the serialization {serialization!r}, not skops: loading a pickled "
            "or cloudpickled model runs code from the file, so fairpca never logs or loads one."
        )
    _check_loader_reads_only_the_skops_file(flavors, sklearn, pyfunc)
    if "onnx" in flavors:
        check_onnx_flavour(model_dir, flavors["onnx"])
    nested = [p.relative_to(model_dir).as_posix() for p in model_dir.rglob("MLmodel")]
    if nested != ["MLmodel"]:
        raise ValueError(NESTED_MLMODEL.format(model_dir=model_dir, nested=sorted(nested)))
    pickles = [p.name for p in model_dir.rglob("*") if p.suffix in {".pkl", ".pickle"}]
    if pickles:
        raise ValueError(f"{model_dir} holds pickle file(s) {pickles}; it is not loaded.")
    code = sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*.py*"))
    if sklearn.get("code") or pyfunc.get("code") or (model_dir / "code").exists() or code:
        raise ValueError(CARRIES_CODE.format(model_dir=model_dir, code=code or "code_paths"))


def _check_loader_reads_only_the_skops_file(flavors: dict, sklearn: dict, pyfunc: dict) -> None:
    """MLflow's pyfunc loader reads ``python_function.model_path`` (under ``data``, when
    given) with the types ``sklearn.skops_trusted_types`` names: all must be the checked
    skops file and trusted types."""
    foreign = sorted(set(flavors) - {"sklearn", "python_function", "onnx"})
    if foreign or pyfunc.get("loader_module") != "mlflow.sklearn":
        raise ValueError(
            f"MLmodel names the flavor(s) {foreign} or the loader "
            f"{pyfunc.get('loader_module')!r}; only a scikit-learn model loaded by "
            "mlflow.sklearn (with its ONNX graph beside it) is accepted."
        )
    if "data" in pyfunc or pyfunc.get("model_path") != sklearn.get("pickled_model"):
        raise ValueError(
            "MLmodel points its python_function loader at another file "
            f"({pyfunc.get('data') or pyfunc.get('model_path')!r}) than the skops file "
            f"({sklearn.get('pickled_model')!r})."
        )
    if foreign := foreign_types(sklearn.get("skops_trusted_types") or []):
        raise ValueError(MLMODEL_TYPES_UNTRUSTED.format(foreign=foreign))


_ONNX_FLAVOUR_KEYS = frozenset(
    {"onnx_version", "data", "providers", "onnx_session_options", "code"}
)


def check_onnx_flavour(model_dir: Path, entry: Any) -> None:
    """The ``onnx`` flavour of a saved model reads only ``model.onnx``: its ``data`` is that
    file, it names no code and no other key, and the graph passes the gate's checks
    (:func:`fairpca.tasks.onnx_runtime.read_graph`: a plain file inside ``model_dir`` at most
    :data:`~fairpca.tasks.onnx_runtime.MAX_GRAPH_BYTES`, standard operator sets only, no
    external data, ONNX's checker; read as a protocol buffer, never run).

    Raises
    ------
    ValueError
        Naming what was found.
    """
    from fairpca.tasks.onnx_runtime import ONNX_FILE, GraphRefused, read_graph

    if not isinstance(entry, dict) or set(entry) - _ONNX_FLAVOUR_KEYS:
        raise ValueError(
            f"MLmodel's onnx flavour is not the entry fairpca writes (keys "
            f"{sorted(entry) if isinstance(entry, dict) else entry!r})."
        )
    if entry.get("data") != ONNX_FILE or entry.get("code") or entry.get("onnx_session_options"):
        raise ValueError(
            f"MLmodel's onnx flavour reads {entry.get('data')!r} (or names code or session "
            f"options); only the graph file {ONNX_FILE!r} is accepted."
        )
    try:
        read_graph(model_dir)
    except GraphRefused as error:
        raise ValueError(
            f"{Path(model_dir) / ONNX_FILE} is not a graph fairpca writes ({error}); it is not "
            "accepted. Re-run the audit."
        ) from None


@dataclass(eq=False)  # compared and hashed by identity, as the model it holds
class VerifiedModel:
    """A scikit-learn model loaded from a verified skops file, with its MLflow ``metadata``
    (the ``MLmodel`` read as YAML: the signature). ``predict`` passes the columns the
    signature names, in its order, as MLflow's pyfunc wrapper does."""

    model: Any
    metadata: Any

    def predict(self, X):
        schema = self.metadata.get_input_schema() if self.metadata is not None else None
        if schema is not None and schema.has_input_names() and hasattr(X, "columns"):
            missing = [name for name in schema.required_input_names() if name not in X.columns]
            if missing:
                raise ValueError(f"the model's signature needs the column(s) {missing}.")
            X = X[[name for name in schema.input_names() if name in X.columns]]
        return self.model.predict(X)


def load_verified_model(model_uri: str, tracking_uri: str | None = None) -> VerifiedModel:
    """The scikit-learn model at the MLflow URI ``model_uri``, loaded only from files
    fairpca verified.

    The model is downloaded into a temporary directory and must pass
    :func:`check_model_files`; the types its skops file needs must be skops' defaults or in
    :data:`TRUSTED_TYPES` (:func:`skops_file_types`). Then that very file is loaded by
    ``skops.io.load`` trusting only those types: no loader named by the files runs, and
    nothing they name is imported. ``tracking_uri`` resolves ``models:/`` and ``runs:/``
    URIs.

    Raises
    ------
    UntrustedModelError
        The model is pickled or cloudpickled, carries code, holds an untrusted type or is
        not a readable skops model; the message says how to log it so that it can be
        loaded, or to pass an object the caller loaded.
    """
    import mlflow.artifacts

    shown = shown_uri(model_uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(
                mlflow.artifacts.download_artifacts(
                    artifact_uri=model_uri, dst_path=tmp, tracking_uri=tracking_uri
                )
            )
        except Exception as error:  # MLflow's message names URIs: each is shown masked
            raise UntrustedModelError(
                f"the model at {shown} could not be downloaded "
                f"({type(error).__name__}: {shown_text(error)})."
            ) from None
        return load_verified_dir(local, shown)


def load_verified_dir(local: Path, shown: str, expected_sha256: str | None = None) -> VerifiedModel:
    """The model of the downloaded MLflow model directory ``local`` (``shown``: where it came
    from, for messages), loaded as :func:`load_verified_model` does; with
    ``expected_sha256`` its skops file must have that SHA-256.

    Raises
    ------
    UntrustedModelError
        As :func:`load_verified_model`.
    """
    from mlflow.models import Model

    try:
        check_model_files(local)
        metadata = Model.load(str(Path(local) / "MLmodel"))
        model = load_skops_pipeline(Path(local), expected_sha256)
    except Exception as error:  # a refusal, or files no reader could parse (not a zip)
        raise UntrustedModelError(
            MODEL_NOT_LOADED.format(shown=shown, error=shown_text(error))
        ) from None
    return VerifiedModel(model, metadata)


def model_digest(model, *more: str) -> str:
    """SHA-256 over a fitted model's content (joblib's hashing of its parameters and arrays:
    sets and dicts in a stable order) and ``more`` (e.g. the training rows' digest): the same
    for two fits that came out equal. The skops file cannot say so: it names its arrays by
    object ids. Nothing is unpickled."""
    from joblib.hashing import NumpyHasher

    hasher = NumpyHasher(hash_name="sha1")
    hasher._hash = hashlib.sha256()  # joblib offers md5 and sha1 only
    return hasher.hash((model, *more))


# ---- written paths ------------------------------------------------------------


def path_inside(base: str | Path, *parts: str) -> Path:
    """``base / parts...``, refused unless it resolves inside ``base`` (no ``..``, no
    absolute part, no symlink out of it)."""
    root = Path(base).resolve()
    target = root.joinpath(*parts).resolve()
    if target == root or not target.is_relative_to(root):
        raise ValueError(
            f"path {'/'.join(parts)!r} would be written outside {root} (it resolves to "
            f"{target}); use a plain name without '/', '..' or an absolute path."
        )
    return target

"""The audit's seal: an HMAC-SHA256 over a manifest of every file relog may upload.

An audit output directory may sit on a shared disk or in an artifact store, and anything
beside its files (a ``*.sha256.json``) can be rewritten together with them. The seal is
keyed by a per-user secret that the directory never holds:

- ``$FAIRPCA_SIGNING_KEY`` (at least 32 characters), or else
- the key file :func:`key_path` (``$XDG_CONFIG_HOME/fairpca/signing.key``, default
  ``~/.config/fairpca/signing.key``), created with mode 0600 on the first audit; a key file
  that others may read, or that is not owned by the current user, is refused.

:func:`seal_output_dir` records, for every file of the directory (path, size, SHA-256), plus
the MLflow run the audit created (:func:`bind_run`), and signs that record;
:func:`verify_output_dir` refuses, naming the file, a directory changed since: a file edited,
added, removed, resized, or a seal edited to match (the MAC no longer verifies).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

__all__ = [
    "KEY_ENV",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "SEAL_FILE",
    "UNSEALED_FILES",
    "SealError",
    "bind_run",
    "bound_run",
    "key_path",
    "seal_output_dir",
    "sha256_file",
    "signing_key",
    "verify_output_dir",
]

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


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks (the one file hash of the project)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def key_path() -> Path:
    """``$XDG_CONFIG_HOME/fairpca/signing.key`` (``~/.config`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "fairpca" / "signing.key"


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
            raise SealError(
                f"{KEY_ENV} holds {len(env)} characters; use at least {_MIN_KEY_CHARS}, e.g. "
                "the output of `python -c 'import secrets; print(secrets.token_hex(32))'`."
            )
        return env.encode()
    path = key_path()
    if not path.exists():
        if not create:
            raise SealError(
                f"no signing key at {path} (nor {KEY_ENV}): the directory was sealed by "
                f"another user or machine. Relog it where the audit ran, or set {KEY_ENV} to "
                "the key it was sealed with."
            )
        _create_key_file(path)
    return _read_key_file(path)


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another audit created it at the same moment
        return
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")


def _read_key_file(path: Path) -> bytes:
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077 or info.st_uid != os.getuid() or not stat.S_ISREG(info.st_mode):
        raise SealError(
            f"signing key {path} has mode {mode:04o} (owner uid {info.st_uid}); only its owner "
            f"may read it. Run `chmod 600 {path}` (as its owner), or set {KEY_ENV}."
        )
    key = path.read_bytes().strip()
    if len(key) < _MIN_KEY_CHARS:
        raise SealError(f"signing key {path} is shorter than {_MIN_KEY_CHARS} characters.")
    return key


def _mac(key: bytes, record: dict[str, Any]) -> str:
    body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def _file_listing(out_dir: Path) -> dict[str, Path]:
    """Every regular file under ``out_dir`` (posix relative path -> path), sealed ones only."""
    files = {}
    for folder, dirs, names in os.walk(out_dir, followlinks=False):
        for name in [*dirs, *names]:
            path = Path(folder) / name
            if path.is_symlink():
                raise SealError(
                    f"{path} is a symbolic link; an audit directory holds only plain files. "
                    "Remove it or re-run the audit."
                )
        for name in names:
            path = Path(folder) / name
            relative = path.relative_to(out_dir).as_posix()
            if relative not in UNSEALED_FILES:
                files[relative] = path
    return files


def _write_seal(out_dir: Path, record: dict[str, Any], key: bytes) -> Path:
    target = Path(out_dir) / SEAL_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({**record, "mac": _mac(key, record)}, indent=1, sort_keys=True))
    tmp.replace(target)
    return target


def seal_output_dir(out_dir: str | Path) -> Path:
    """Sign the manifest (path, size, SHA-256) of every file of ``out_dir``; return the seal.

    Called once, by the audit, after its last file is written and before anything is
    logged; the key file is created on first use. The key must not lie inside ``out_dir``.
    """
    out_dir = Path(out_dir)
    key = signing_key(create=True)
    _refuse_key_inside(out_dir)
    files = {
        name: {"size": path.stat().st_size, "sha256": sha256_file(path)}
        for name, path in sorted(_file_listing(out_dir).items())
    }
    return _write_seal(out_dir, {"version": _SEAL_VERSION, "files": files, "run": None}, key)


def _refuse_key_inside(out_dir: Path) -> None:
    if os.environ.get(KEY_ENV):
        return
    if key_path().resolve().is_relative_to(out_dir.resolve()):
        raise SealError(
            f"the signing key {key_path()} lies inside the output directory {out_dir}; set "
            "XDG_CONFIG_HOME (or FAIRPCA_SIGNING_KEY) so the key is kept elsewhere."
        )


def _verified_record(out_dir: Path) -> dict[str, Any]:
    """The seal's record once its MAC verifies with this user's key."""
    path = out_dir / SEAL_FILE
    if not path.is_file():
        raise SealError(
            f"{out_dir} has no {SEAL_FILE}: it was not written and signed by a fairpca audit "
            "(or predates signing), so relog does not trust it. Re-run the audit."
        )
    if path.stat().st_size > 16 * 2**20:
        raise SealError(f"{path} is larger than any seal fairpca writes; it is not read.")
    try:
        sealed = json.loads(path.read_text())
        mac = sealed.pop("mac")
    except (ValueError, KeyError, AttributeError, TypeError) as error:
        raise SealError(f"{path} is not a readable seal ({error}); re-run the audit.") from error
    if not hmac.compare_digest(str(mac), _mac(signing_key(), sealed)):
        raise SealError(
            f"{path} does not verify with this user's signing key: the seal or its manifest "
            "was edited after the audit, or another key signed it. Re-run the audit."
        )
    return sealed


def verify_output_dir(
    out_dir: str | Path,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> dict[str, Any]:
    """Check ``out_dir`` is exactly what the audit sealed; return the verified record.

    Sizes are compared (and capped) before any file is hashed, so a huge planted file is
    refused in milliseconds.

    Raises
    ------
    SealError
        No seal, a MAC that does not verify, a symbolic link, a file added, missing, of
        another size or content than sealed (named), or a file or total over the caps.
    """
    out_dir = Path(out_dir)
    record = _verified_record(out_dir)
    sealed, present = record["files"], _file_listing(out_dir)
    added = sorted(set(present) - set(sealed))
    if added:
        raise SealError(
            f"{out_dir}: file(s) {added} were added after the audit (not in its signed "
            "manifest); relog uploads nothing else. Remove them or re-run the audit."
        )
    missing = sorted(set(sealed) - set(present))
    if missing:
        raise SealError(f"{out_dir}: file(s) {missing} of the signed manifest are missing.")
    _check_sizes(out_dir, sealed, present, max_file_bytes, max_total_bytes)
    for name, entry in sealed.items():
        if sha256_file(present[name]) != entry["sha256"]:
            raise SealError(
                f"{out_dir}: file {name!r} changed after the audit (its SHA-256 differs from "
                "the signed manifest); it is not logged. Re-run the audit."
            )
    return record


def _check_sizes(out_dir, sealed, present, max_file_bytes: int, max_total_bytes: int) -> None:
    total = 0
    for name, entry in sealed.items():
        size = present[name].stat().st_size
        if size != entry["size"]:
            raise SealError(
                f"{out_dir}: file {name!r} has {size} bytes, the signed manifest "
                f"{entry['size']}: it changed after the audit. Re-run the audit."
            )
        if size > max_file_bytes:
            raise SealError(
                f"{out_dir}: file {name!r} has {size / 2**20:.0f} MiB, over relog's cap of "
                f"{max_file_bytes / 2**20:.0f} MiB per file; it is not uploaded."
            )
        total += size
    if total > max_total_bytes:
        raise SealError(
            f"{out_dir}: the files add up to {total / 2**20:.0f} MiB, over relog's cap of "
            f"{max_total_bytes / 2**20:.0f} MiB; nothing is uploaded."
        )


def bind_run(out_dir: str | Path, *, run_id: str, experiment_id: str) -> None:
    """Record (and sign) the MLflow run that logs this directory, so a later relog completes
    that run and no other. The directory must still verify."""
    out_dir = Path(out_dir)
    record = _verified_record(out_dir)
    record["run"] = {"run_id": str(run_id), "experiment_id": str(experiment_id)}
    _write_seal(out_dir, record, signing_key())


def bound_run(record: dict[str, Any]) -> dict[str, str] | None:
    """The run a verified seal names (``run_id``, ``experiment_id``), or None."""
    run = record.get("run")
    return dict(run) if isinstance(run, dict) else None

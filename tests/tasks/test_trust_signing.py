"""The seal: a per-user key kept outside the directory, an HMAC over every file's size and
SHA-256, and refusals that name the file that changed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from messages import matching

from fairpca.tasks.trust import (
    FILE_CHANGED,
    FILE_OVER_CAP,
    FILES_ADDED,
    FILES_MISSING,
    KEY_ENV,
    KEY_FILE_OPEN,
    KEY_INSIDE_OUTPUT,
    NO_SEAL,
    NO_SIGNING_KEY,
    SEAL_DOES_NOT_VERIFY,
    SEAL_FILE,
    SHORT_KEY,
    SIZE_CHANGED,
    SYMBOLIC_LINK,
    TOTAL_OVER_CAP,
    SealError,
    key_path,
    seal_output_dir,
    sha256_file,
    signing_key,
    verify_output_dir,
)


@pytest.fixture
def own_key(tmp_path, monkeypatch):
    """A fresh XDG_CONFIG_HOME (no key yet) and no key in the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(KEY_ENV, raising=False)
    return tmp_path / "config" / "fairpca" / "signing.key"


def a_directory(tmp_path: Path) -> Path:
    out_dir = tmp_path / "out"
    (out_dir / "model").mkdir(parents=True)
    (out_dir / "audit.json").write_text(json.dumps({"audit_id": "a"}))
    (out_dir / "model" / "model.skops").write_bytes(b"\x00" * 1000)
    return out_dir


def test_the_key_file_is_created_once_with_mode_0600(own_key):
    assert not own_key.exists()
    key = signing_key(create=True)
    assert key_path() == own_key and oct(own_key.stat().st_mode & 0o777) == "0o600"
    assert len(key) == 64 and signing_key() == key  # read back, not created again


def test_a_key_file_others_may_read_is_refused(own_key):
    signing_key(create=True)
    own_key.chmod(0o644)
    with pytest.raises(SealError, match=matching(KEY_FILE_OPEN, path=own_key, mode=0o644)):
        signing_key()


def test_relog_never_creates_a_key(own_key, tmp_path):
    with pytest.raises(SealError, match=matching(NO_SIGNING_KEY, path=own_key)):
        signing_key()
    assert not own_key.exists()


def test_an_environment_key_must_be_long(own_key, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(SealError, match=matching(SHORT_KEY, count=5, minimum=32)):
        signing_key()
    monkeypatch.setenv(KEY_ENV, "k" * 40)
    assert signing_key() == b"k" * 40 and not own_key.exists()


def test_a_sealed_directory_verifies_and_lists_every_file(own_key, tmp_path):
    out_dir = a_directory(tmp_path)
    seal_output_dir(out_dir)
    record = verify_output_dir(out_dir)
    assert record["files"]["model/model.skops"] == {
        "size": 1000,
        "sha256": hashlib.sha256(b"\x00" * 1000).hexdigest(),
    }
    assert set(record["files"]) == {"audit.json", "model/model.skops"}
    assert record["run"] is None


def test_another_key_does_not_verify(own_key, tmp_path, monkeypatch):
    out_dir = a_directory(tmp_path)
    seal_output_dir(out_dir)
    monkeypatch.setenv(KEY_ENV, "another-users-key-" + "x" * 30)
    with pytest.raises(SealError, match=matching(SEAL_DOES_NOT_VERIFY)):
        verify_output_dir(out_dir)


def test_a_manifest_edited_to_match_does_not_verify(own_key, tmp_path):
    out_dir = a_directory(tmp_path)
    seal_output_dir(out_dir)
    (out_dir / "audit.json").write_text(json.dumps({"audit_id": "bb"}))
    size = (out_dir / "audit.json").stat().st_size
    with pytest.raises(SealError, match=matching(SIZE_CHANGED, name="audit.json", size=size)):
        verify_output_dir(out_dir)
    (out_dir / "audit.json").write_text(json.dumps({"audit_id": "b"}))  # same size
    with pytest.raises(SealError, match=matching(FILE_CHANGED, name="audit.json")):
        verify_output_dir(out_dir)
    seal = json.loads((out_dir / SEAL_FILE).read_text())
    seal["files"]["audit.json"]["sha256"] = sha256_file(out_dir / "audit.json")
    (out_dir / SEAL_FILE).write_text(json.dumps(seal))
    with pytest.raises(SealError, match=matching(SEAL_DOES_NOT_VERIFY)):
        verify_output_dir(out_dir)


def test_missing_unsealed_and_symlinked_files_are_named(own_key, tmp_path):
    out_dir = a_directory(tmp_path)
    with pytest.raises(SealError, match=matching(NO_SEAL, out_dir=out_dir, seal=SEAL_FILE)):
        verify_output_dir(out_dir)
    seal_output_dir(out_dir)
    (out_dir / "model" / "model.skops").unlink()
    with pytest.raises(SealError, match=matching(FILES_MISSING, missing=["model/model.skops"])):
        verify_output_dir(out_dir)
    (out_dir / "model" / "model.skops").symlink_to(out_dir / "audit.json")
    link = out_dir / "model" / "model.skops"
    with pytest.raises(SealError, match=matching(SYMBOLIC_LINK, path=link)):
        verify_output_dir(out_dir)


def test_added_files_and_files_over_the_size_caps_are_refused(own_key, tmp_path):
    out_dir = a_directory(tmp_path)
    seal_output_dir(out_dir)
    over = matching(FILE_OVER_CAP, name="model/model.skops", mib=1000 / 2**20)
    with pytest.raises(SealError, match=over):
        verify_output_dir(out_dir, max_file_bytes=999)
    with pytest.raises(SealError, match=matching(TOTAL_OVER_CAP, out_dir=out_dir)):
        verify_output_dir(out_dir, max_total_bytes=1000)
    (out_dir / "model" / "extra.pkl").write_bytes(b"x")
    with pytest.raises(SealError, match=matching(FILES_ADDED, added=["model/extra.pkl"])):
        verify_output_dir(out_dir)


def test_a_key_inside_the_output_directory_is_refused(tmp_path, monkeypatch):
    out_dir = a_directory(tmp_path)
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(out_dir / "config"))
    inside = matching(KEY_INSIDE_OUTPUT, key=key_path(), out_dir=out_dir)
    with pytest.raises(SealError, match=inside):
        seal_output_dir(out_dir)


def test_one_file_hash(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(3 * 2**20 + 5))
    assert sha256_file(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_preflight_refuses_an_unusable_key_before_any_work(own_key, tmp_path, monkeypatch):
    from fairpca.flows.config import AuditConfig
    from fairpca.flows.preflight import PreflightError, check_before_run

    config = AuditConfig(dataset="german", k=2, output_dir=tmp_path / "out")
    check_before_run(config)  # creates the key
    own_key.chmod(0o640)
    with pytest.raises(PreflightError, match=matching(KEY_FILE_OPEN, mode=0o640)) as refused:
        check_before_run(config)
    assert isinstance(refused.value.__cause__, SealError)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "out" / "cfg"))
    with pytest.raises(PreflightError, match="lies inside --output-dir"):
        check_before_run(config)

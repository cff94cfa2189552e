"""The fairness gate's attestations: an Ed25519 signature by a key only the gate holds over
the version, the digest of its model files and of the policy, and the verdict; refusals say
what was forged."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import replace

import pytest
from messages import matching

from fairpca.tasks.trust import (
    ANOTHER_SIGNING_KEY,
    ATTESTATION_UNREADABLE,
    FILES_HOLD_A_LINK,
    GATE_KEY_ENV,
    GATE_KEY_FILE_ENV,
    GATE_KEY_NOT_HEX,
    GATE_PUBLIC_KEY_ENV,
    KEY_FILE_OPEN,
    NO_GATE_KEY,
    NO_VERIFYING_KEY,
    SIGNATURE_DOES_NOT_VERIFY,
    SYMBOLIC_LINK,
    Attestation,
    AttestationError,
    create_gate_key,
    files_digest,
    gate_public_key,
    gate_signing_key,
    public_key_hex,
    sign_attestation,
    verify_attestation,
)

STATEMENT = Attestation(
    model="credit", version="2", model_digest="a" * 64, graph_digest="d" * 64,
    policy_digest="b" * 64,
    verdict="passed", gate_run_id="run-1", flow_run_id="flow-1", signed_at="2026-12-01T00:00:00Z",
)  # fmt: skip


@pytest.fixture
def gate_key(monkeypatch, tmp_path):
    """A fresh gate key in the environment; no key file, no public key set."""
    monkeypatch.setenv(GATE_KEY_ENV, secrets.token_hex(32))
    monkeypatch.setenv(GATE_KEY_FILE_ENV, str(tmp_path / "none" / "gate.key"))
    monkeypatch.delenv(GATE_PUBLIC_KEY_ENV, raising=False)
    return gate_signing_key()


def test_a_signed_attestation_verifies_and_reads_back(gate_key):
    text = sign_attestation(STATEMENT)
    assert len(text) < 1000  # one registry tag (MLflow keeps 5,000 characters)
    assert verify_attestation(text) == STATEMENT


@pytest.mark.parametrize(
    ("field", "value"),
    [("version", "3"), ("verdict", "passed "), ("model_digest", "c" * 64), ("model", "x"),
     ("graph_digest", "e" * 64)],
)
def test_any_edited_field_breaks_the_signature(gate_key, field, value):
    signed = json.loads(sign_attestation(replace(STATEMENT, verdict="failed")))
    signed[field] = value
    with pytest.raises(AttestationError, match=re.escape(SIGNATURE_DOES_NOT_VERIFY)) as refused:
        verify_attestation(json.dumps(signed))
    assert refused.value.tampered


def test_an_attestation_signed_before_graphs_were_bound_reads_back_without_a_graph(gate_key):
    """A v1 statement (no graph digest) still verifies, with an empty graph digest: such a
    pass never counts now (tests/tasks/test_registry.py), but it is no forgery."""
    from dataclasses import asdict

    from fairpca.tasks.trust import _canonical, _key_id

    fields = {k: v for k, v in asdict(STATEMENT).items() if k != "graph_digest"}
    statement = {"statement": "fairpca.gate.attestation/v1", **fields}
    signature = gate_key.sign(_canonical(statement)).hex()
    text = json.dumps({**statement, "key": _key_id(gate_key.public_key()), "signature": signature})
    assert verify_attestation(text) == replace(STATEMENT, graph_digest="")
    current = json.loads(sign_attestation(STATEMENT))
    assert current["statement"] == "fairpca.gate.attestation/v2"
    del current["graph_digest"]  # a v2 statement without its graph digest: not one we write
    with pytest.raises(AttestationError, match=re.escape(ATTESTATION_UNREADABLE)) as refused:
        verify_attestation(json.dumps(current))
    assert refused.value.tampered


def test_another_key_and_garbage_are_refused_as_tampering(gate_key, monkeypatch):
    text = sign_attestation(STATEMENT)
    monkeypatch.setenv(GATE_KEY_ENV, secrets.token_hex(32))  # a forger's own key pair
    forged = sign_attestation(STATEMENT)
    with pytest.raises(AttestationError, match=matching(ANOTHER_SIGNING_KEY)) as refused:
        verify_attestation(forged, gate_key.public_key())
    assert refused.value.tampered
    for garbage in ("passed", "{}", json.dumps({**json.loads(text), "extra": 1}), "[1]"):
        with pytest.raises(AttestationError, match=re.escape(ATTESTATION_UNREADABLE)):
            verify_attestation(garbage, gate_key.public_key())


def test_scorers_verify_with_the_public_key_alone(gate_key, monkeypatch):
    text = sign_attestation(STATEMENT)
    public = public_key_hex(gate_key.public_key())
    monkeypatch.delenv(GATE_KEY_ENV)
    with pytest.raises(AttestationError, match=matching(NO_VERIFYING_KEY)):
        gate_public_key()
    monkeypatch.setenv(GATE_PUBLIC_KEY_ENV, public)
    assert verify_attestation(text) == STATEMENT
    with pytest.raises(AttestationError, match=matching(NO_GATE_KEY, env=GATE_KEY_ENV)):
        gate_signing_key()  # the public key signs nothing
    monkeypatch.setenv(GATE_PUBLIC_KEY_ENV, public[:-2])
    not_hex = matching(GATE_KEY_NOT_HEX, where=GATE_PUBLIC_KEY_ENV)
    with pytest.raises(AttestationError, match=not_hex):
        gate_public_key()


def test_the_key_file_is_created_0600_once_and_refused_when_others_may_read_it(
    monkeypatch, tmp_path
):
    path = tmp_path / "gate" / "gate.key"
    monkeypatch.delenv(GATE_KEY_ENV, raising=False)
    monkeypatch.setenv(GATE_KEY_FILE_ENV, str(path))
    assert create_gate_key() == (path, True)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    key = public_key_hex(gate_signing_key().public_key())
    assert create_gate_key() == (path, False)
    assert public_key_hex(gate_signing_key().public_key()) == key
    path.chmod(0o644)
    open_key = matching(KEY_FILE_OPEN, path=path, mode=0o644, env=GATE_KEY_ENV)
    with pytest.raises(AttestationError, match=open_key):
        gate_signing_key()


def test_files_digest_covers_every_file_and_its_name(tmp_path):
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "MLmodel").write_text("flavors: {}\n")
    (model / "sub" / "model.skops").write_bytes(b"\x00" * 100)
    digest = files_digest(model)
    assert files_digest(model) == digest
    (model / "sub" / "model.skops").write_bytes(b"\x00" * 99 + b"\x01")
    assert files_digest(model) != digest
    (model / "sub" / "model.skops").write_bytes(b"\x00" * 100)
    (model / "sub" / "model.skops").rename(model / "sub" / "other.skops")
    assert files_digest(model) != digest
    (model / "sub" / "other.skops").rename(model / "sub" / "model.skops")
    (model / "extra.pkl").write_bytes(b"")
    assert files_digest(model) != digest
    (model / "extra.pkl").unlink()
    (model / "link").symlink_to(model / "MLmodel")
    link = matching(FILES_HOLD_A_LINK) + matching(SYMBOLIC_LINK, path=model / "link")
    with pytest.raises(AttestationError, match=link) as refused:
        files_digest(model)
    assert refused.value.tampered

"""The receiver's delivery check against MLflow's own signing code, and over HTTP.

Signatures are made by ``mlflow.webhooks.delivery._generate_hmac_signature`` (what the
tracking server sends), so a change of MLflow's scheme fails these tests.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from mlflow.webhooks.delivery import _generate_hmac_signature

from fairpca.flows.gate_server import (
    DEPLOYMENT,
    MAX_BODY_BYTES,
    RECONCILE_DEPLOYMENT,
    DeliveryQueue,
    Refused,
    check_signature,
    create_app,
    health_headers,
    parse_event,
    sign,
)

SECRET = "s" * 16 + "e" * 16 + "cret"
BODY = json.dumps(
    {
        "entity": "model_version",
        "action": "created",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "data": {"name": "credit", "version": "3", "source": "models:/m-1", "tags": {}},
    }
)


def headers_for(
    body: str, *, secret: str = SECRET, timestamp: int | None = None, delivery_id: str | None = None
) -> dict[str, str]:
    delivery_id = delivery_id or str(uuid.uuid4())
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "X-MLflow-Delivery-Id": delivery_id,
        "X-MLflow-Timestamp": stamp,
        "X-MLflow-Signature": _generate_hmac_signature(secret, delivery_id, stamp, body),
    }


def test_our_signature_is_mlflows():
    assert sign(SECRET, "id-1", "1700000000", BODY.encode()) == _generate_hmac_signature(
        SECRET, "id-1", "1700000000", BODY
    )


def test_valid_delivery_is_accepted():
    headers = headers_for(BODY)
    delivery = check_signature(SECRET, headers, BODY.encode(), now=time.time())
    assert delivery == headers["X-MLflow-Delivery-Id"]


def test_header_names_are_case_insensitive():
    headers = {k.lower(): v for k, v in headers_for(BODY).items()}
    assert check_signature(SECRET, headers, BODY.encode(), now=time.time())


@pytest.mark.parametrize(
    "change",
    ["wrong secret", "tampered body", "tampered id", "tampered timestamp", "no signature"],
)
def test_forged_or_altered_deliveries_are_refused_401(change):
    headers = headers_for(BODY, secret="x" * 40 if change == "wrong secret" else SECRET)
    body = BODY.encode()
    if change == "tampered body":
        body = BODY.replace('"3"', '"4"').encode()
    elif change == "tampered id":
        headers["X-MLflow-Delivery-Id"] = str(uuid.uuid4())
    elif change == "tampered timestamp":
        headers["X-MLflow-Timestamp"] = str(int(headers["X-MLflow-Timestamp"]) + 1)
    elif change == "no signature":
        del headers["X-MLflow-Signature"]
    with pytest.raises(Refused) as refused:
        check_signature(SECRET, headers, body, now=time.time())
    assert refused.value.status == 401


@pytest.mark.parametrize("offset", [-301, 301, -3600])
def test_stale_or_future_timestamps_are_refused_401(offset):
    now = time.time()
    headers = headers_for(BODY, timestamp=int(now) + offset)
    with pytest.raises(Refused, match="stale timestamp") as refused:
        check_signature(SECRET, headers, BODY.encode(), now=now, max_age=300)
    assert refused.value.status == 401


def test_fresh_timestamp_within_max_age_is_accepted():
    now = time.time()
    headers = headers_for(BODY, timestamp=int(now) - 299)
    assert check_signature(SECRET, headers, BODY.encode(), now=now, max_age=300)


def test_replayed_delivery_id_is_refused_409(tmp_path):
    queue = DeliveryQueue(tmp_path / "queue.db")
    event = parse_event(BODY.encode())
    queue.accept("id-1", event, time.time())
    with pytest.raises(Refused) as refused:
        queue.accept("id-1", event, time.time())
    assert refused.value.status == 409
    # the replay left one queued event, and a new queue on the same file still knows the id
    assert queue.counts() == {"pending": 1}
    with pytest.raises(Refused):
        DeliveryQueue(tmp_path / "queue.db").accept("id-1", event, time.time())


def test_other_events_and_non_events():
    other = json.dumps({"entity": "registered_model", "action": "created", "data": {}})
    assert parse_event(other.encode()) is None
    alias = json.dumps(
        {
            "entity": "model_version_alias",
            "action": "created",
            "data": {"name": "m", "alias": "champion", "version": "2"},
        }
    )
    assert parse_event(alias.encode()).parameters() == {
        "model_name": "m",
        "version": "2",
        "event": "model_version_alias.created",
        "alias": "champion",
    }
    with pytest.raises(Refused) as refused:
        parse_event(b"not json")
    assert refused.value.status == 400


def test_http_refusals_start_nothing_and_are_logged(tmp_path, caplog):
    from starlette.testclient import TestClient

    queue = DeliveryQueue(tmp_path / "queue.db")
    app = create_app(SECRET, queue, {"credit"}, drain_interval=None)
    good = headers_for(BODY)
    stale = headers_for(BODY, timestamp=int(time.time()) - 3600)
    wrong = headers_for(BODY, secret="w" * 40)
    with TestClient(app) as http, caplog.at_level("WARNING", logger="fairpca.gate"):
        assert http.post("/webhook", content=BODY, headers=wrong).status_code == 401
        assert http.post("/webhook", content=BODY, headers=stale).status_code == 401
        assert http.post("/webhook", content=BODY, headers=good).status_code == 202
        assert http.post("/webhook", content=BODY, headers=good).status_code == 409
        health = http.get("/health", headers=health_headers(SECRET)).json()
    assert health["queue"] == {"pending": 1}
    refusals = [r.getMessage() for r in caplog.records if "refused delivery" in r.getMessage()]
    assert len(refusals) == 3
    assert any("signature does not match" in m for m in refusals)
    assert any("stale timestamp" in m for m in refusals)
    assert any("replay" in m for m in refusals)
    assert all(SECRET not in m for m in caplog.messages)


def test_unwatched_models_are_acknowledged_but_not_queued(tmp_path):
    from starlette.testclient import TestClient

    queue = DeliveryQueue(tmp_path / "queue.db")
    app = create_app(SECRET, queue, {"another-model"}, drain_interval=None)
    with TestClient(app) as http:
        response = http.post("/webhook", content=BODY, headers=headers_for(BODY))
    assert (response.status_code, response.json()["state"]) == (202, "ignored")
    assert queue.due(time.time()) == []


def test_queue_keeps_an_event_until_a_flow_run_starts(tmp_path):
    from fairpca.flows.gate_server import drain_once

    queue = DeliveryQueue(tmp_path / "queue.db")
    queue.accept("id-1", parse_event(BODY.encode()), time.time())
    calls = []

    def prefect_down(deployment, parameters, delivery_id):
        calls.append(delivery_id)
        raise ConnectionError("Prefect API unreachable")

    assert drain_once(queue, prefect_down) == 0
    assert queue.counts() == {"pending": 1}
    assert drain_once(queue, prefect_down) == 0  # not due yet: waits 1 s after attempt 1
    assert calls == ["id-1"]
    reopened = DeliveryQueue(tmp_path / "queue.db")  # survives a receiver restart
    reopened._connect().execute("UPDATE deliveries SET next_try = 0")
    assert drain_once(reopened, lambda deployment, parameters, delivery_id: "run-7") == 1
    assert reopened.flow_runs() == {"id-1": "run-7"}


def test_every_start_queues_a_reconciler_run(tmp_path):
    """Events sent while the receiver was down are lost: each start queues one run of the
    reconciler deployment, drained like an event (retried while Prefect is down)."""
    from starlette.testclient import TestClient

    from fairpca.flows.gate_server import drain_once

    queue = DeliveryQueue(tmp_path / "queue.db")
    app = create_app(SECRET, queue, {"credit"}, drain_interval=None, reconcile_on_start=True)
    with TestClient(app) as http:
        http.post("/webhook", content=BODY, headers=headers_for(BODY))
    started = []
    drain_once(queue, lambda deployment, parameters, job: started.append((deployment, parameters)))
    assert started == [
        (RECONCILE_DEPLOYMENT, {}),
        (DEPLOYMENT, parse_event(BODY.encode()).parameters()),
    ]


def test_health_shows_the_queue_only_to_a_signed_caller(tmp_path):
    from starlette.testclient import TestClient

    queue = DeliveryQueue(tmp_path / "queue.db")
    app = create_app(SECRET, queue, {"credit"}, drain_interval=None)
    old = health_headers(SECRET, now=time.time() - 3600)
    with TestClient(app) as http:
        http.post("/webhook", content=BODY, headers=headers_for(BODY))
        assert http.get("/health").json() == {"status": "ok"}
        assert http.get("/health", headers=health_headers("w" * 40)).json() == {"status": "ok"}
        assert http.get("/health", headers=old).json() == {"status": "ok"}  # replayed later
        signed = http.get("/health", headers=health_headers(SECRET)).json()
    assert signed == {"status": "ok", "queue": {"pending": 1}}


def test_bodies_over_the_limit_are_refused_413_and_unsigned_ones_unread(tmp_path, caplog):
    from starlette.testclient import TestClient

    queue = DeliveryQueue(tmp_path / "queue.db")
    app = create_app(SECRET, queue, {"credit"}, drain_interval=None, max_body=1000)
    big = BODY + " " * 1000
    signed = headers_for(big)

    def chunks():  # no Content-Length: streamed (chunked) until the cap
        yield big[:600].encode()
        yield big[600:].encode()

    with TestClient(app) as http, caplog.at_level("WARNING", logger="fairpca.gate"):
        assert http.post("/webhook", content=big, headers=signed).status_code == 413
        streamed = http.post("/webhook", content=chunks(), headers=signed)
        assert streamed.status_code == 413 and "streamed body" in streamed.json()["refused"]
        assert http.post("/webhook", content=big).status_code == 401
        assert http.post("/webhook", content=BODY, headers=headers_for(BODY)).status_code == 202
    assert queue.counts() == {"pending": 1}
    assert MAX_BODY_BYTES == 2**20


def test_the_queue_keeps_replay_ids_and_forgets_old_deliveries(tmp_path):
    queue = DeliveryQueue(tmp_path / "queue.db")
    now = 1_800_000_000.0
    event = parse_event(BODY.encode())
    for age in (10, 400, 900, 2 * 86_400):  # seconds before now
        queue.accept(f"done-{age}", event, now - age)
        queue.started(f"done-{age}", "run")
    queue.accept("ignored-old", None, now - 3 * 86_400)
    queue.accept("pending-old", event, now - 3 * 86_400)
    assert queue.prune(now) == 2  # a day old: finished deliveries go, pending ones stay
    assert queue.counts() == {"started": 3, "pending": 1}
    assert queue.prune(now, max_rows=1) == 1  # the oldest beyond 1, not inside 600 s
    assert sorted(queue.flow_runs()) == ["done-10", "done-400"]
    with pytest.raises(Refused):  # a replay within the window is still refused
        queue.accept("done-400", event, now)


def _rss_kib(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status").read().splitlines():  # noqa: SIM115
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _flood(port: int, headers: dict[str, str], total: int, chunked: bool) -> tuple[str, float]:
    """POST ``total`` bytes to the receiver as fast as loopback takes them; the status
    line and the seconds until it came."""
    import socket
    import threading

    lines = ["POST /webhook HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    block = b"x" * 2**20
    piece = b"%x\r\n%s\r\n" % (len(block), block) if chunked else block

    def send():
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            for _ in range(total // len(block)):
                sock.sendall(piece)
        except OSError:  # the receiver answered and closed: the rest is never read
            pass

    started = time.monotonic()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    status = sock.makefile("rb").readline().decode().strip()
    elapsed = time.monotonic() - started
    sock.close()
    sender.join(timeout=60)
    return status, elapsed


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_a_300_mb_body_is_refused_within_a_second_in_under_50_mb(tmp_path, free_port):
    """The receiver as deployed (``fairpca gate serve``, uvicorn, its own process): a
    300 MB POST, unsigned, with forged signature headers and a Content-Length, and streamed
    without one, is answered in under a second while the receiver's peak RSS grows by less
    than 50 MB (issue 28, 3: 20 s and +800 MB before)."""
    import os
    import subprocess
    import sys

    import httpx

    (tmp_path / "reference.csv").write_text("x1,group,approved\n1,0,1\n")
    (tmp_path / "credit.yaml").write_text(
        "model: credit\nreference: {path: reference.csv, label: approved, sensitive: [group]}\n"
    )
    port = free_port()
    env = {**os.environ, "FAIRPCA_WEBHOOK_SECRET": SECRET,
           "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"}  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "fairpca.flows", "gate", "serve", "--policy-dir", str(tmp_path),
         "--port", str(port), "--queue", str(tmp_path / "q.db")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        total = 300 * 2**20
        forged = headers_for(BODY, secret="f" * 40)
        before = _rss_kib(server.pid, "VmRSS")
        Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # peak RSS := RSS now
        results = {
            "unsigned": _flood(port, {}, total, chunked=False),
            "forged, Content-Length": _flood(port, forged, total, chunked=False),
            "forged, streamed": _flood(port, forged, total, chunked=True),
        }
        growth_mb = (_rss_kib(server.pid, "VmHWM") - before) / 1024
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"\nreceiver RSS {before / 1024:.0f} MB, peak growth {growth_mb:.1f} MB;",
          {k: f"{s} in {t:.3f} s" for k, (s, t) in results.items()})  # fmt: skip
    assert results["unsigned"][0].startswith("HTTP/1.1 401")
    assert results["forged, Content-Length"][0].startswith("HTTP/1.1 413")
    assert results["forged, streamed"][0].startswith("HTTP/1.1 413")
    assert all(seconds < 1.0 for _, seconds in results.values()), results
    assert growth_mb < 50


def _self_signed(directory):
    """A certificate and key for 127.0.0.1 (the test's own CA)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(
            ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    certfile, keyfile = directory / "gate.crt", directory / "gate.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile


def test_receiver_serves_https_with_a_certificate(tmp_path, monkeypatch):
    import socket
    import threading

    import httpx
    import uvicorn

    from fairpca.flows.gate_server import server_config

    (tmp_path / "reference.csv").write_text("x1,group,approved\n1,0,1\n")
    (tmp_path / "credit.yaml").write_text(
        "model: credit\nreference: {path: reference.csv, label: approved, sensitive: [group]}\n"
    )
    certfile, keyfile = _self_signed(tmp_path)
    monkeypatch.setenv("FAIRPCA_WEBHOOK_SECRET", SECRET)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = server_config(
        host="127.0.0.1", port=port, policy_dir=str(tmp_path), queue_path=str(tmp_path / "q.db"),
        certfile=str(certfile), keyfile=str(keyfile), drain_interval=None,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        url = f"https://127.0.0.1:{port}/webhook"
        with httpx.Client(verify=str(certfile)) as https:
            response = https.post(url, content=BODY, headers=headers_for(BODY))
        assert response.status_code == 202 and response.json()["state"] == "queued"
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the CA
            httpx.post(url, content=BODY, headers=headers_for(BODY))
    finally:
        server.should_exit = True
        thread.join(timeout=30)


# ---- malformed signed events (issue 34, 10) --------------------------------------------------


def _alias_event(alias) -> str:
    data = {"name": "credit", "alias": alias, "version": "3"}
    return json.dumps({"entity": "model_version_alias", "action": "created", "data": data})


def test_signed_but_malformed_events_are_refused_400_and_not_queued(tmp_path):
    """A 200,000-deep JSON body (500 before: RecursionError) and events whose fields have
    the wrong type (an object alias was queued and retried for ever)."""
    from starlette.testclient import TestClient

    queue = DeliveryQueue(tmp_path / "queue.db")
    app = create_app(SECRET, queue, {"credit"}, drain_interval=None)
    deep = "[" * 200_000 + "]" * 200_000
    version_created = json.loads(BODY)
    version_created["data"]["version"] = {"$gt": 1}
    bodies = [deep, _alias_event({"a": 1}), _alias_event(None), json.dumps(version_created)]
    with TestClient(app, raise_server_exceptions=False) as http:
        statuses = [
            http.post("/webhook", content=body, headers=headers_for(body)).status_code
            for body in bodies
        ]
        good = _alias_event("champion")
        assert http.post("/webhook", content=good, headers=headers_for(good)).status_code == 202
    assert statuses == [400] * len(bodies)
    assert queue.counts() == {"pending": 1}


# ---- `fairpca gate serve` as deployed: a connection flood, a stop signal (issue 34, 3 and 8) ---


def _policy_dir(tmp_path: Path) -> Path:
    (tmp_path / "reference.csv").write_text("x1,group,approved\n1,0,1\n")
    (tmp_path / "credit.yaml").write_text(
        "model: credit\nreference: {path: reference.csv, label: approved, sensitive: [group]}\n"
    )
    return tmp_path


class GateServe:
    """``fairpca gate serve`` from this environment's bin folder, with a user's environment
    (``env``) and the webhook secret; ready once ``GET /health`` answers."""

    def __init__(self, user_cli, tmp_path: Path, port: int, **env: str) -> None:
        import subprocess

        fairpca, user_env = user_cli
        self.port, self.log = port, tmp_path / "serve.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [fairpca, "gate", "serve", "--policy-dir", str(_policy_dir(tmp_path)),
                 "--port", str(port), "--queue", str(tmp_path / "q.db")],
                env={**user_env, "FAIRPCA_WEBHOOK_SECRET": SECRET, **env},
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def wait_ready(self, seconds: float = 240) -> None:
        import httpx

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).is_success:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"not ready within {seconds} s: {self.log.read_text()}")

    def deliver(self, source: str = "127.0.0.1", timeout: float = 10):
        """A correctly signed delivery sent from the address ``source``; the response."""
        import httpx

        transport = httpx.HTTPTransport(local_address=source)
        with httpx.Client(transport=transport, timeout=timeout) as client:
            url = f"http://127.0.0.1:{self.port}/webhook"
            return client.post(url, content=BODY, headers=headers_for(BODY))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def _closed_by_server(sock, seconds: float) -> bool:
    """Whether the server closed ``sock`` within ``seconds`` (read up to the end: an answer
    such as a 401 may come first)."""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if sock.recv(65536) == b"":
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        pass
    return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="binds 127.0.0.2 and .3")
def test_seventy_idle_sockets_do_not_deafen_the_receiver(user_cli, tmp_path, free_port):
    """The attack of issue 34 (3): 70 sockets send only a request line and stay open (every
    signed delivery got 503 while they stayed). A delivery from another address is accepted
    at once; the flooding address holds at most its bound of connections, and the server
    closes every idle one after its header deadline (and a half-sent body after its body
    deadline), after which that address is served again."""
    import socket

    serve = GateServe(user_cli, tmp_path, free_port(), PREFECT_API_URL="http://127.0.0.1:9/api")
    flood = []
    try:
        serve.wait_ready()
        for index in range(70):
            sock = socket.socket()
            sock.bind(("127.0.0.2" if index < 65 else "127.0.0.3", 0))
            sock.connect(("127.0.0.1", serve.port))
            if index < 65:
                sock.sendall(b"POST /webhook HTTP/1.1\r\n")
            else:  # complete (signed) headers, a tenth of the body
                signed = "".join(f"{k}: {v}\r\n" for k, v in headers_for(BODY).items())
                head = f"POST /webhook HTTP/1.1\r\nHost: x\r\n{signed}"
                head += f"Content-Length: {len(BODY)}\r\n\r\n"
                sock.sendall(head.encode() + BODY[:10].encode())
            flood.append(sock)
        response = serve.deliver("127.0.0.1")
        assert response.status_code == 202, response.text  # 503 before
        assert response.json()["state"] == "queued"
        closed = [_closed_by_server(sock, 30) for sock in flood]
        assert all(closed), f"{closed.count(False)} of 70 still open after 30 s"
        assert serve.deliver("127.0.0.2").status_code == 202
    finally:
        for sock in flood:
            sock.close()
        serve.stop()
    from fairpca.flows.gate_server import MAX_CONNECTIONS_PER_CLIENT

    log = serve.log.read_text()
    assert log.count(f"over {MAX_CONNECTIONS_PER_CLIENT} open") == 65 - MAX_CONNECTIONS_PER_CLIENT
    assert "no complete headers within 5 s" in log and "no complete body within 10 s" in log


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_sigterm_ends_gate_serve_and_its_prefect_server_within_5_s(user_cli, tmp_path, free_port):
    """``fairpca gate serve`` as a user runs it (no Prefect API configured: it starts a
    temporary Prefect server). SIGTERM (what systemd sends) ends it and every process it
    started within 5 s, and frees its port (before: the server was left to init)."""
    import os
    import signal
    import socket

    from fairpca.flows import runtime

    serve = GateServe(user_cli, tmp_path, free_port())
    try:
        serve.wait_ready()
        processes = [serve.process.pid, *runtime.descendants(serve.process.pid)]
        assert len(processes) >= 2, "no Prefect server process"
        started = time.monotonic()
        os.kill(serve.process.pid, signal.SIGTERM)
        deadline = started + 10
        while any(runtime._running(p) for p in processes) and time.monotonic() < deadline:
            time.sleep(0.05)
        took = time.monotonic() - started
        assert serve.process.wait(timeout=10) == 128 + signal.SIGTERM
    finally:
        serve.stop()
    print(f"every process gone {took:.2f} s after SIGTERM")
    assert took < runtime.STOP_SECONDS, serve.log.read_text()
    with socket.socket() as sock:  # free again (as a server binds it, past TIME_WAIT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", serve.port))
    assert "interrupted by SIGTERM while it received webhooks" in serve.log.read_text()


# ---- slow forged uploads (issue 53): they hold no place in the bound, the oldest goes first ---


def _slow_forged(port: int, source: str, seconds: float = 10.0):
    """A connection from ``source`` that sends forged signature headers, a Content-Length and
    ``Expect: 100-continue``, and never its body: ``(socket, waiting)``, returned once the
    receiver's app waits for the body (it answers ``100 Continue`` then: ``waiting``) or the
    receiver closed the connection (not ``waiting``)."""
    import socket

    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    forged = "".join(f"{k}: {v}\r\n" for k, v in headers_for(BODY, secret="f" * 40).items())
    head = f"POST /webhook HTTP/1.1\r\nHost: x\r\n{forged}Content-Length: {len(BODY)}\r\n"
    sock.sendall(f"{head}Expect: 100-continue\r\n\r\n".encode())
    answer, deadline = b"", time.monotonic() + seconds
    try:
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if not (chunk := sock.recv(4096)):
                return sock, False
            answer += chunk
    except ConnectionResetError:
        return sock, False
    assert answer.startswith(b"HTTP/1.1 100"), answer[:200]
    return sock, True


def _open(sock) -> bool:
    """Whether the server has not closed ``sock`` (nothing waiting to be read but its EOF)."""
    import socket

    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False


def _signed_keep_alive(port: int, source: str):
    """A connection from ``source`` that sent one signed delivery (answered 202) and stays
    open (HTTP/1.1 keeps it alive)."""
    import socket

    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    signed = "".join(f"{k}: {v}\r\n" for k, v in headers_for(BODY).items())
    head = f"POST /webhook HTTP/1.1\r\nHost: x\r\n{signed}Content-Length: {len(BODY)}\r\n\r\n"
    sock.sendall(head.encode() + BODY.encode())
    answer = b""
    while not answer.endswith(b"}") and (chunk := sock.recv(4096)):  # a 10 s timeout each
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
    return sock


def _delivered(serve: GateServe, source: str) -> int | str:
    """The status of a signed delivery from ``source``, or the error that ended it."""
    import httpx

    try:
        return serve.deliver(source).status_code
    except httpx.HTTPError as error:
        return type(error).__name__


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="binds 127.0.0.x addresses")
def test_slow_forged_uploads_do_not_deafen_the_receiver(user_cli, tmp_path, free_port):
    """Issue 53: connections with forged signature headers whose body never arrives held the
    bound of requests being handled (64 from two addresses: every signed delivery got 503)
    and, from one address, the per-address bound (32: a signed delivery from the same address
    was closed at once). Now they hold no place in the bound, and past the per-address bound
    or the global one (``MAX_CONNECTIONS``) the oldest unverified connection is closed, so a
    signed delivery gets 202 in each case. Each slow connection is counted only once the
    receiver's app waits for its body (``100 Continue``)."""
    from fairpca.flows.gate_server import (
        KEEP_ALIVE_SECONDS,
        MAX_CONNECTIONS,
        MAX_CONNECTIONS_PER_CLIENT,
    )

    serve = GateServe(user_cli, tmp_path, free_port(), PREFECT_API_URL="http://127.0.0.1:9/api")
    sockets = []

    def flood(sources: list[str]) -> list[bool]:
        opened = [_slow_forged(serve.port, source) for source in sources]
        sockets.extend(sock for sock, _ in opened)
        return [waiting for _, waiting in opened]

    try:
        serve.wait_ready()
        # 64 from two addresses: the bound of MAX_REQUESTS = 64 requests being handled
        assert all(flood(["127.0.0.1", "127.0.0.2"] * 32))
        assert _delivered(serve, "127.0.0.3") == 202  # 503 before
        assert _delivered(serve, "127.0.0.1") == 202  # closed at once before (33rd of .1)
        for sock in sockets:
            sock.close()
        sockets.clear()
        # 64 from one address: each past its bound closes that address's oldest unverified
        # one; an older kept-alive connection that sent a signed delivery stays
        signed = _signed_keep_alive(serve.port, "127.0.0.4")
        started = time.monotonic()
        waiting = flood(["127.0.0.4"] * 64)
        assert _delivered(serve, "127.0.0.4") == 202
        assert all(waiting) and [_open(sock) for sock in sockets] == [False] * 34 + [True] * 30
        assert _open(signed), "the signed connection was closed"
        assert time.monotonic() - started < KEEP_ALIVE_SECONDS  # (it closes when idle so long)
        signed.close()
        for sock in sockets:
            sock.close()
        sockets.clear()
        # MAX_CONNECTIONS from several addresses (each within its bound): the global cap
        sources = [f"127.0.1.{1 + i // MAX_CONNECTIONS_PER_CLIENT}" for i in range(MAX_CONNECTIONS)]
        assert all(flood(sources))
        assert _delivered(serve, "127.0.2.1") == 202
        assert not _open(sockets[0]) and all(_open(sock) for sock in sockets[1:])
    finally:
        for sock in sockets:
            sock.close()
        serve.stop()
    log = serve.log.read_text()
    assert log.count(f"over {MAX_CONNECTIONS_PER_CLIENT} open from 127.0.0.4") == 34
    assert f"over {MAX_CONNECTIONS} open in all" in log


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="binds 127.0.0.x addresses")
def test_websocket_upgrades_are_plain_http_and_do_not_deafen_the_receiver(
    user_cli, tmp_path, free_port
):
    """Review of issue 53: uvicorn upgraded ``Upgrade: websocket`` requests to its WebSocket
    protocol, whose connections the receiver's guard then read as its own (an AttributeError
    on every request while one was open: signed deliveries were reset). Upgrades are not
    offered (the webhook is plain HTTP), and signed deliveries get 202 meanwhile."""
    import socket

    serve = GateServe(user_cli, tmp_path, free_port(), PREFECT_API_URL="http://127.0.0.1:9/api")
    sockets = []
    try:
        serve.wait_ready()
        upgrade = ("GET /webhook HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n")  # fmt: skip
        answers, stop = [], threading.Event()

        def upgrades() -> None:  # one client asking to upgrade, again and again
            while not stop.is_set() and len(answers) < 2000:
                with socket.create_connection(("127.0.0.1", serve.port), timeout=10) as sock:
                    sock.sendall(upgrade.encode())
                    with contextlib.suppress(OSError):
                        answers.append(sock.recv(4096)[:12])

        flood = threading.Thread(target=upgrades)
        flood.start()
        try:
            delivered = [_delivered(serve, "127.0.0.1") for _ in range(20)]
        finally:
            stop.set()
            flood.join(30)
        assert delivered == [202] * 20
        assert answers and not any(a.startswith(b"HTTP/1.1 101") for a in answers)
    finally:
        for sock in sockets:
            sock.close()
        serve.stop()
    assert "AttributeError" not in serve.log.read_text()

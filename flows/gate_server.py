"""The webhook receiver of the fairness gate: MLflow registry events in, Prefect runs out.

``POST /webhook`` checks each delivery the way MLflow signs it
(:mod:`mlflow.webhooks.delivery`): ``X-MLflow-Signature: v1,<base64 HMAC-SHA256>`` over
``<X-MLflow-Delivery-Id>.<X-MLflow-Timestamp>.<body>`` with the shared secret
(``FAIRPCA_WEBHOOK_SECRET``), compared in constant time. Refused, logged, and nothing started:

* 401: a missing header (before the body is read), a wrong signature, or a timestamp more
  than ``max_age`` seconds (5 minutes) from the receiver's clock;
* 413: a body over ``max_body`` bytes (1 MiB; MLflow's payloads are a few KiB), refused from
  its ``Content-Length`` before any of it is read, or once the streamed body passes the cap;
  memory per request stays under the cap;
* 409: a delivery id already accepted (a replay);
* 400: a signed body that is not an MLflow event (not JSON, nested beyond Python's recursion
  limit, or a field of the wrong type).

A connection flood cannot deafen it (:class:`GuardedH11Protocol`): a connection is closed
when its headers are not complete ``HEADER_SECONDS`` after it opened (or after its last
response), or its body ``BODY_SECONDS`` after its headers; idle keep-alive connections close
after ``KEEP_ALIVE_SECONDS``. The 503 bound (``MAX_REQUESTS``) counts complete requests whose
signature checked out, until answered: a connection that has not sent one (slow headers, a
body that never arrives, forged headers) holds no place in it. Open connections are bounded
instead, by ``MAX_CONNECTIONS_PER_CLIENT`` per client address and ``MAX_CONNECTIONS`` in
all: past either bound the OLDEST unverified connection (of that address, or of any) is
closed, so a newcomer, such as MLflow's next signed delivery, is served, and a flooder
only closes its own older connections.

An accepted event of a watched model is written to a SQLite queue and answered ``202`` at
once; a background thread drains the queue into runs of the Prefect deployment
``fairness-gate/on-registration`` (``run_deployment(..., timeout=0)``, idempotency key = the
delivery id), retrying with back-off while the Prefect server is down. The queue, not
MLflow's three retries (about 7 s), is what keeps events through an outage: an event is
lost only if the receiver cannot write its queue, and then it answers 503 so MLflow retries.
Events sent while the receiver itself is down are lost: on every start the receiver queues
one run of the reconciler (``fairness-gate-reconcile/on-schedule``, also scheduled every few
minutes), which checks every protected alias against the gate's attestations.

The queue keeps what replay protection needs: a finished delivery is deleted once it is
older than ``RETENTION_S`` (one day, never less than ``REPLAY_WINDOW_S``, twice ``max_age``:
an older delivery is refused as stale anyway), and beyond ``max_rows`` finished deliveries
the oldest go first.
``GET /health`` answers ``{"status": "ok"}`` to anyone; the queue's counts only to a caller
that signs the request with the webhook secret (:func:`health_headers`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("fairpca.gate")

SECRET_ENV = "FAIRPCA_WEBHOOK_SECRET"
MIN_SECRET_CHARS = 32
DEPLOYMENT = "fairness-gate/on-registration"
RECONCILE_DEPLOYMENT = "fairness-gate-reconcile/on-schedule"
RECONCILE = "reconcile"  # the queue's event name of a reconciler run
MAX_AGE_S = 300
MAX_BODY_BYTES = 2**20
RETENTION_S = 86_400
REPLAY_WINDOW_S = 2 * MAX_AGE_S  # a delivery id kept this long still refuses a replay
MAX_ROWS = 10_000
PRUNE_EVERY_S = 60.0
MAX_REQUESTS = 64  # verified requests handled at once (unverified connections do not count)
MAX_CONNECTIONS_PER_CLIENT = 32  # open connections of one client address
# open connections in all; each may hold a body of up to MAX_BODY_BYTES while it arrives
MAX_CONNECTIONS = 128
VERIFIED = "fairpca_gate_verified"  # request.state flag: the request's signature checked out
HEADER_SECONDS = 5.0  # from a connection (or its next request) to complete headers
BODY_SECONDS = 10.0  # from complete headers to the whole body
KEEP_ALIVE_SECONDS = 5  # an idle connection between requests
# what a connection owes next in each state of its peer, and for how long
_OWED = {h11.IDLE: ("headers", HEADER_SECONDS), h11.SEND_BODY: ("body", BODY_SECONDS)}
SIGNATURE_HEADER = "X-MLflow-Signature"
DELIVERY_HEADER = "X-MLflow-Delivery-Id"
TIMESTAMP_HEADER = "X-MLflow-Timestamp"
HEALTH_SIGNATURE_HEADER = "X-Fairpca-Signature"
HEALTH_TIMESTAMP_HEADER = "X-Fairpca-Timestamp"
GATED_EVENTS = ("model_version.created", "model_version_alias.created")


class Refused(Exception):
    """A delivery that is not accepted: the HTTP status and the reason (logged)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def secret_from_env() -> str:
    """The webhook secret from ``FAIRPCA_WEBHOOK_SECRET``; a clear error when unusable."""
    secret = os.environ.get(SECRET_ENV, "")
    if len(secret) < MIN_SECRET_CHARS:
        raise ValueError(
            f"set {SECRET_ENV} to a secret of at least {MIN_SECRET_CHARS} characters (the same "
            "for `fairpca gate register` and `fairpca gate serve`), e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'."
        )
    return secret


def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """MLflow's signature header value: ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``."""
    content = f"{delivery_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode("utf-8"), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def _signed_headers(headers) -> tuple[str, str, str]:
    """The delivery id, timestamp and signature headers; :class:`Refused` (401) when one is
    missing, so an unsigned request is refused before its body is read."""
    lower = {key.lower(): value for key, value in headers.items()}
    found = tuple(lower.get(h.lower(), "") for h in (DELIVERY_HEADER, TIMESTAMP_HEADER,
                                                     SIGNATURE_HEADER))  # fmt: skip
    if not all(found):
        raise Refused(401, "missing signature, delivery id or timestamp header")
    return found


def check_signature(
    secret: str, headers: dict[str, str], body: bytes, *, now: float, max_age: float = MAX_AGE_S
) -> str:
    """The delivery id of an authentic, fresh delivery; raises :class:`Refused` (401) else.

    ``headers`` keys are matched case-insensitively. The signature is checked before the
    timestamp, so an unsigned caller learns nothing about the clock. Several space-separated
    ``v1,<sig>`` values (Standard Webhooks key rotation) are accepted if any one matches.
    """
    delivery_id, timestamp, given = _signed_headers(headers)
    expected = sign(secret, delivery_id, timestamp, body).encode()
    if not any(hmac.compare_digest(expected, part.encode()) for part in given.split()):
        raise Refused(401, "signature does not match (wrong secret or altered request)")
    try:
        sent = int(timestamp)
    except ValueError:
        raise Refused(401, f"timestamp {timestamp[:20]!r} is not a Unix time") from None
    if abs(now - sent) > max_age:
        raise Refused(401, f"stale timestamp: {now - sent:.0f} s from now (max {max_age:.0f} s)")
    return delivery_id


def health_headers(secret: str, now: float | None = None) -> dict[str, str]:
    """Headers that show the receiver's queue in ``GET /health``: the webhook secret's HMAC
    of ``health.<timestamp>.`` (MLflow's scheme, with the id ``health``)."""
    stamp = str(int(time.time() if now is None else now))
    signature = sign(secret, "health", stamp, b"")
    return {HEALTH_TIMESTAMP_HEADER: stamp, HEALTH_SIGNATURE_HEADER: signature}


def _health_signed(secret: str, headers, now: float) -> bool:
    stamp = headers.get(HEALTH_TIMESTAMP_HEADER, "")
    given = headers.get(HEALTH_SIGNATURE_HEADER, "").encode()
    expected = sign(secret, "health", stamp, b"").encode()
    signed = stamp.isdigit() and hmac.compare_digest(expected, given)
    return signed and abs(now - int(stamp)) <= MAX_AGE_S


async def read_capped(request, limit: int) -> bytes:
    """The request body, refused (:class:`Refused` 413) when its ``Content-Length`` says
    more than ``limit`` bytes (nothing is read) or the streamed body passes ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise Refused(413, f"body of {declared[:20]} bytes refused (limit {limit})")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"streamed body over the limit of {limit} bytes refused")
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class GateEvent:
    """One registry event the gate acts on; a field of the wrong type is a :class:`TypeError`
    (a signed event that is malformed is refused, and never queued or retried)."""

    event: str
    name: str
    version: str
    alias: str | None = None

    def __post_init__(self) -> None:
        checks = {
            "event": self.event in GATED_EVENTS,
            "name": isinstance(self.name, str) and self.name != "",
            "version": isinstance(self.version, str) and self.version.isdigit(),
            "alias": isinstance(self.alias, str) and self.alias != ""
            if self.event == "model_version_alias.created"
            else self.alias is None,
        }
        if wrong := [field for field, ok in checks.items() if not ok]:
            raise TypeError(f"malformed {', '.join(wrong)} in a {self.event!r} event")

    def parameters(self) -> dict[str, Any]:
        return dict(model_name=self.name, version=self.version, event=self.event, alias=self.alias)


def parse_event(body: bytes) -> GateEvent | None:
    """The gated event in an MLflow payload, None for another event; :class:`Refused` (400)
    for a body that is not an MLflow event (JSON nested past the recursion limit too)."""
    try:
        payload = json.loads(body)
        event = f"{payload['entity']}.{payload['action']}"
        data = payload["data"]
        if event not in GATED_EVENTS:
            return None
        return GateEvent(event, data["name"], data["version"], data.get("alias"))
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise Refused(400, f"not an MLflow webhook payload ({type(error).__name__})") from None


class DeliveryQueue:
    """Accepted delivery ids and the events still to start, in one SQLite file.

    An id is recorded once (a replay is refused); an event stays ``pending`` until a Prefect
    flow run exists for it, across receiver restarts.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._write(
            "CREATE TABLE IF NOT EXISTS deliveries (delivery_id TEXT PRIMARY KEY, "
            "received_at REAL, event TEXT, parameters TEXT, state TEXT, attempts INTEGER "
            "DEFAULT 0, next_try REAL DEFAULT 0, flow_run_id TEXT, last_error TEXT)"
        )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def _write(self, statement: str, *values) -> int:
        """Run one writing statement (one writer at a time); the rows it changed."""
        with self._lock, closing(self._connect()) as db:
            return db.execute(statement, values).rowcount

    def _read(self, query: str, *values) -> list[tuple]:
        with closing(self._connect()) as db:
            return db.execute(query, values).fetchall()

    def _insert(self, delivery_id: str, now: float, event, parameters, state: str) -> None:
        row = (delivery_id, now, event, parameters, state)
        self._write("INSERT INTO deliveries (delivery_id, received_at, event, parameters, state) "
                    "VALUES (?, ?, ?, ?, ?)", *row)  # fmt: skip

    def accept(self, delivery_id: str, event: GateEvent | None, now: float) -> None:
        """Record the id (and the event to start); :class:`Refused` (409) if seen before."""
        parameters = event and json.dumps(event.parameters())
        try:
            self._insert(delivery_id, now, event and event.event, parameters,
                         "ignored" if event is None else "pending")  # fmt: skip
        except sqlite3.IntegrityError:
            raise Refused(409, "delivery id already received (replay)") from None

    def schedule_reconcile(self, now: float) -> None:
        """Queue one run of the reconciler (the receiver does on every start)."""
        self._insert(f"{RECONCILE}-{uuid.uuid4()}", now, RECONCILE, "{}", "pending")

    def due(self, now: float) -> list[tuple[str, str, dict[str, Any], int]]:
        """``(id, event, flow parameters, attempts)`` of every pending job due by ``now``."""
        rows = self._read("SELECT delivery_id, event, parameters, attempts FROM deliveries "
                          "WHERE state = 'pending' AND next_try <= ? ORDER BY received_at",
                          now)  # fmt: skip
        return [(d, e, json.loads(p), a) for d, e, p, a in rows]

    def prune(self, now: float, *, max_rows: int = MAX_ROWS) -> int:
        """Delete finished deliveries older than ``RETENTION_S`` (at least
        ``REPLAY_WINDOW_S``), then the oldest beyond ``max_rows`` finished ones, never one
        younger than ``REPLAY_WINDOW_S`` (its id still refuses a replay). Pending jobs stay.
        The number deleted."""
        aged = self._write("DELETE FROM deliveries WHERE state != 'pending' AND received_at < ?",
                           now - max(RETENTION_S, REPLAY_WINDOW_S))  # fmt: skip
        surplus = self._write(
            "DELETE FROM deliveries WHERE state != 'pending' AND received_at < ? AND "
            "delivery_id NOT IN (SELECT delivery_id FROM deliveries WHERE state != "
            "'pending' ORDER BY received_at DESC LIMIT ?)",
            now - REPLAY_WINDOW_S, max_rows,
        )  # fmt: skip
        return aged + surplus

    def started(self, delivery_id: str, flow_run_id: str) -> None:
        sql = "UPDATE deliveries SET state = 'started', flow_run_id = ? WHERE delivery_id = ?"
        self._write(sql, flow_run_id, delivery_id)

    def retry_later(self, delivery_id: str, attempts: int, error: str, now: float) -> float:
        wait = min(60.0, 2.0**attempts)
        self._write("UPDATE deliveries SET attempts = ?, next_try = ?, last_error = ? "
                    "WHERE delivery_id = ?", attempts + 1, now + wait, error[:500],
                    delivery_id)  # fmt: skip
        return wait

    def counts(self) -> dict[str, int]:
        return dict(self._read("SELECT state, COUNT(*) FROM deliveries GROUP BY state"))

    def flow_runs(self) -> dict[str, str]:
        """``{delivery id: flow run id}`` of the events started so far."""
        query = "SELECT delivery_id, flow_run_id FROM deliveries WHERE state = 'started'"
        return dict(self._read(query))


def start_flow_run(deployment: str, parameters: dict[str, Any], delivery_id: str) -> str:
    """Create a run of ``deployment`` and return at once (the worker runs it)."""
    from prefect.deployments import run_deployment

    params = {k: v for k, v in parameters.items() if v is not None}
    name = f"gate-{params['model_name']}-v{params['version']}" if params else "gate-reconcile"
    flow_run = run_deployment(
        deployment, parameters=params, timeout=0, idempotency_key=f"mlflow-delivery-{delivery_id}",
        flow_run_name=name[:100], as_subflow=False,
    )  # fmt: skip
    return str(flow_run.id)


def drain_once(queue: DeliveryQueue, starter=start_flow_run) -> int:
    """Start a flow run for every due job (an event's gate run, a reconciler run); failures
    wait (2, 4, ... 60 s) and retry."""
    started = 0
    for delivery_id, event, parameters, attempts in queue.due(time.time()):
        deployment = RECONCILE_DEPLOYMENT if event == RECONCILE else DEPLOYMENT
        try:
            flow_run_id = starter(deployment, parameters, delivery_id)
        except Exception as error:
            wait = queue.retry_later(
                delivery_id, attempts, f"{type(error).__name__}: {error}", time.time()
            )
            logger.warning(
                "could not start %s for delivery %s (attempt %d: %s); retrying in %.0f s",
                deployment, delivery_id, attempts + 1, type(error).__name__, wait,
            )  # fmt: skip
            continue
        queue.started(delivery_id, flow_run_id)
        logger.info("delivery %s: started flow run %s %s", delivery_id, flow_run_id, parameters)
        started += 1
    return started


def _drain_forever(queue: DeliveryQueue, stop: threading.Event, interval: float) -> None:
    pruned_at = 0.0
    while not stop.is_set():
        try:
            drain_once(queue)
            if time.monotonic() - pruned_at >= PRUNE_EVERY_S:
                pruned_at = time.monotonic()
                if deleted := queue.prune(time.time()):
                    logger.info("deleted %d finished deliveries from the queue", deleted)
        except Exception:  # the queue file itself failed: log and keep the thread alive
            logger.exception("draining the gate queue failed")
        stop.wait(interval)


def _draining(queue: DeliveryQueue, interval: float | None, reconcile_on_start: bool):
    """A lifespan that queues one reconciler run (``reconcile_on_start``) and drains
    ``queue`` in a thread every ``interval`` s (None: no thread)."""

    @asynccontextmanager
    async def lifespan(app):
        if reconcile_on_start:
            queue.schedule_reconcile(time.time())
            logger.info("queued a run of %s (every start)", RECONCILE_DEPLOYMENT)
        stop = threading.Event()
        thread = threading.Thread(target=_drain_forever, args=(queue, stop, interval), daemon=True)
        if interval is not None:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread.is_alive():
                thread.join(timeout=10)

    return lifespan


def create_app(
    secret: str, queue: DeliveryQueue, watched: set[str], *, max_body: int = MAX_BODY_BYTES,
    drain_interval: float | None = 1.0, reconcile_on_start: bool = False,
):  # fmt: skip
    """The Starlette app: ``POST /webhook`` and ``GET /health``. With ``drain_interval`` a
    background thread drains the queue while the app runs (None: no thread, for tests);
    with ``reconcile_on_start`` a reconciler run is queued when it starts."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def webhook(request: Request) -> JSONResponse:
        client = request.client.host if request.client else "?"
        now = time.time()
        delivery_id = None
        try:
            _signed_headers(request.headers)
            body = await read_capped(request, max_body)
            delivery_id = check_signature(secret, dict(request.headers), body, now=now)
            setattr(request.state, VERIFIED, True)  # the protocol's bounds (GuardedH11Protocol)
            event = parse_event(body)
            if event is not None and event.name not in watched:
                event = None
            queue.accept(delivery_id, event, now)
        except Refused as refusal:
            status, reason = refusal.status, refusal.reason
            logger.warning("refused delivery from %s: %d %s", client, status, reason)
            return JSONResponse({"refused": reason}, status_code=status)
        except ClientDisconnect:  # the sender went away mid-body: nothing to answer
            logger.warning("delivery from %s: the sender disconnected mid-body", client)
            return JSONResponse({"refused": "disconnected"}, status_code=400)
        except sqlite3.Error as error:  # not recorded: MLflow retries on 503
            logger.error("could not queue delivery %s: %s", delivery_id, error)
            return JSONResponse({"error": "queue unavailable"}, status_code=503)
        state = "ignored" if event is None else "queued"
        logger.info("delivery %s %s: %s", delivery_id, state, event)
        return JSONResponse({"delivery_id": delivery_id, "state": state}, status_code=202)

    async def health(request: Request) -> JSONResponse:
        if not _health_signed(secret, request.headers, time.time()):
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "ok", "queue": queue.counts()})

    routes = [Route("/webhook", webhook, methods=["POST"]), Route("/health", health)]
    lifespan = _draining(queue, drain_interval, reconcile_on_start)
    return Starlette(routes=routes, lifespan=lifespan)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with the deadlines and bounds a flood cannot spend.

    uvicorn arms no timer before a first request completes and counts every open socket
    against ``limit_concurrency``, so sockets that send half a request line would hold its
    503 bound for ever. Here each connection carries one deadline for what it owes next
    (complete headers, then the whole body); the 503 bound counts verified requests being
    handled (:meth:`handling`); open connections are bounded per client address and in all,
    closing the oldest unverified one first (:meth:`_make_room`).
    """

    deadline: asyncio.TimerHandle | None = None
    waiting_for: str | None = None
    opened_at: float = 0.0
    verified: bool = False  # an earlier request on this connection was signed

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.opened_at = time.monotonic()
        self._make_room()
        if not transport.is_closing():
            self._arm_deadline()

    def handling(self) -> bool:
        """Whether this connection's request is complete, signed, and not yet answered."""
        cycle = getattr(self, "cycle", None)
        if cycle is None or cycle.more_body or cycle.response_complete:
            return False
        return bool(cycle.scope.get("state", {}).get(VERIFIED))

    def _unverified(self) -> bool:
        """Open, not handling a signed request, and no signed request before on it."""
        return not (self.transport.is_closing() or self.verified or self.handling())

    def _make_room(self) -> None:
        """Past ``MAX_CONNECTIONS_PER_CLIENT`` open connections of this client's address, or
        ``MAX_CONNECTIONS`` in all, close the oldest unverified one (of that address, then of
        any); this new connection only if no older one is unverified."""
        host = self.client[0] if self.client else None
        open_ = [c for c in self.connections if isinstance(c, GuardedH11Protocol)
                 and c.transport and not c.transport.is_closing()]  # fmt: skip
        same = [c for c in open_ if c.client and c.client[0] == host]
        for crowd, bound, where in ((same, MAX_CONNECTIONS_PER_CLIENT, f"from {host}"),
                                    (open_, MAX_CONNECTIONS, "in all")):  # fmt: skip
            if len(crowd) > bound:
                unverified = [c for c in crowd if c._unverified()]
                if not unverified:  # every one verified (or handling): nothing to close
                    continue
                oldest = min(unverified, key=lambda c: c.opened_at)
                logger.warning(
                    "closed the oldest unverified connection (from %s, open %.1f s): over %d "
                    "open %s", oldest.client and oldest.client[0],
                    time.monotonic() - oldest.opened_at, bound, where,
                )  # fmt: skip
                oldest.transport.close()
                if oldest is self:
                    return
                open_.remove(oldest)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._arm_deadline()

    def handle_events(self) -> None:
        # uvicorn answers 503 when limit_concurrency <= its count of connections or tasks:
        # 0 while MAX_REQUESTS verified requests are handled, else no bound
        handled = sum(1 for c in self.connections
                      if isinstance(c, GuardedH11Protocol) and c.handling())  # fmt: skip
        self.limit_concurrency = 0 if handled >= MAX_REQUESTS else None
        super().handle_events()

    def on_response_complete(self) -> None:
        self.verified = self.verified or bool(self.scope.get("state", {}).get(VERIFIED))
        super().on_response_complete()
        self._arm_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        super().connection_lost(exc)

    def _arm_deadline(self) -> None:
        """A deadline when the connection starts to owe headers or a body (not renewed by
        more bytes: a trickle does not extend it); none while the app handles a request."""
        owed, seconds = _OWED.get(self.conn.their_state, (None, None))
        if owed == self.waiting_for:
            return
        if self.deadline is not None:
            self.deadline.cancel()
        self.waiting_for, self.deadline = owed, None
        if owed is not None:
            self.deadline = self.loop.call_later(seconds, self._expire, owed, seconds)

    def _expire(self, owed: str, seconds: float) -> None:
        if not self.transport.is_closing():
            host = self.client and self.client[0]
            logger.warning("closed a connection from %s: no complete %s within %.0f s",
                           host, owed, seconds)  # fmt: skip
            self.transport.close()


def server_config(
    *, host: str, port: int, policy_dir: str | None, queue_path: str,
    certfile: str | None = None, keyfile: str | None = None, drain_interval: float | None = 1.0,
):  # fmt: skip
    """The uvicorn configuration of the receiver (HTTPS when given a certificate and key);
    the secret and the policies are checked here, before anything listens."""
    import uvicorn

    from fairpca.flows.gate import load_policies

    secret = secret_from_env()
    watched = set(load_policies(policy_dir))
    queue = DeliveryQueue(queue_path)
    queue.prune(time.time())
    app = create_app(secret, queue, watched, drain_interval=drain_interval, reconcile_on_start=True)
    logger.info("watching %s; queue %s", sorted(watched), queue_path)
    return uvicorn.Config(
        app, host=host, port=port, ssl_certfile=certfile, ssl_keyfile=keyfile,
        log_level="info", http=GuardedH11Protocol, timeout_keep_alive=KEEP_ALIVE_SECONDS,
        ws="none",  # webhooks are plain HTTP: an upgrade request gets no WebSocket protocol
    )  # fmt: skip


def serve(prepare: Callable[[], object] = lambda: None, **options) -> None:
    """Run the receiver until stopped (options of :func:`server_config`); ``prepare()`` runs
    once the options are checked, before it listens (``fairpca gate serve`` starts its
    Prefect server there)."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logger.setLevel(logging.INFO)  # accepted deliveries and started runs too, not only refusals
    config = server_config(**options)
    prepare()
    uvicorn.Server(config).run()


# ---- the MLflow side: the webhook that points at the receiver ------------------------------

WEBHOOK_NAME = "fairpca-fairness-gate"


def secret_fingerprint(secret: str) -> str:
    """A keyed digest that tells whether the webhook holds this secret (MLflow never returns
    a webhook's secret), without revealing it: 12 hex digits of an HMAC of a fixed text."""
    return hmac.new(secret.encode(), b"fairpca-gate-fingerprint", hashlib.sha256).hexdigest()[:12]


def _find_webhook(client, name: str):
    token = None
    while True:
        page = client.list_webhooks(max_results=100, page_token=token)
        found = next((webhook for webhook in page if webhook.name == name), None)
        if found is not None or not (token := page.token):
            return found


def register_webhook(
    client, *, url: str, models: list[str], secret: str, name: str = WEBHOOK_NAME
) -> tuple[str, str]:
    """Create or update the webhook ``name``; ``(action, webhook id)`` with action
    ``created``, ``updated`` or ``unchanged`` (a second run with the same values changes
    nothing). MLflow delivers a webhook's events for every registered model; ``models`` is
    recorded in its description and the receiver acts only on models with a policy file."""
    description = (
        f"fairpca fairness gate for models: {', '.join(sorted(set(models)))}; "
        f"secret fingerprint {secret_fingerprint(secret)}"
    )
    wanted = {"url": url, "events": list(GATED_EVENTS), "description": description}
    existing = _find_webhook(client, name)
    if existing is None:
        webhook = client.create_webhook(name=name, secret=secret, status="ACTIVE", **wanted)
        return "created", webhook.webhook_id
    found = (existing.url, sorted(map(str, existing.events)), existing.description)
    if found == (url, sorted(GATED_EVENTS), description) and existing.status.is_active():
        return "unchanged", existing.webhook_id
    client.update_webhook(existing.webhook_id, secret=secret, status="ACTIVE", **wanted)
    return "updated", existing.webhook_id

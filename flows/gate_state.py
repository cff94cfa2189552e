"""The fairness gate's own state, on the gate's host: what no registry user can reset.

A SQLite file beside the gate's key (``$FAIRPCA_GATE_STATE``, else ``gate-state.sqlite`` in
the folder of :func:`fairpca.tasks.trust.gate_key_path`; mode 0600 in a 0700 folder), per
registry (its URI without credentials) and registered model:

* the ledger the gate last signed (:class:`fairpca.tasks.gate_ledger.Ledger`): its
  sequence, policy digest and the latest pass of each version. The published tag is a copy;
  when the copy differs (deleted, restored from an older one) the gate signs it anew from
  here (:meth:`GateState.update`).
* the judgements made, for the judgement budget (:meth:`GateState.charge`; one that ends
  in ``error`` is taken back, :meth:`GateState.refund`).

Every change is one write transaction (``BEGIN IMMEDIATE``): concurrent gate runs on the
host update the ledger one after the other, and the tag is written inside the transaction,
so the published copy is never older than one written before it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from contextlib import closing, contextmanager
from pathlib import Path

from fairpca.tasks.gate_ledger import Ledger, now_text
from fairpca.tasks.trust import gate_key_path

STATE_ENV = "FAIRPCA_GATE_STATE"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ledgers (registry TEXT, model TEXT, policy_digest TEXT, "
    "sequence INTEGER, signed_at TEXT, passes TEXT, PRIMARY KEY (registry, model))",
    "CREATE TABLE IF NOT EXISTS judgements (registry TEXT, model TEXT, policy_digest TEXT, "
    "version TEXT, at REAL)",
)


def state_path() -> Path:
    """``$FAIRPCA_GATE_STATE``, else ``gate-state.sqlite`` beside the gate's key file."""
    given = os.environ.get(STATE_ENV)
    return Path(given) if given else gate_key_path().parent / "gate-state.sqlite"


class GateState:
    """The gate's state file (:func:`state_path` unless ``path``)."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path) if path else state_path()

    @contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE"):
        """A connection in one transaction (a write one unless ``begin`` says otherwise),
        committed when the body ends, rolled back when it raises."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fresh = not self.path.exists()
        with closing(sqlite3.connect(self.path, timeout=60, isolation_level=None)) as connection:
            if fresh:
                os.chmod(self.path, 0o600)
            for statement in _SCHEMA:
                connection.execute(statement)
            connection.execute(begin)
            try:
                yield connection
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    def stored(self, registry: str, model: str) -> Ledger | None:
        """The ledger the gate last signed for ``model`` of ``registry`` (None: none)."""
        with self._transaction("BEGIN") as connection:
            return _stored(connection, registry, model)

    def update(
        self,
        registry: str,
        model: str,
        change: Callable[[Ledger | None], tuple[str, dict[str, str]]],
        publish: Callable[[Ledger], None],
    ) -> Ledger:
        """In one write transaction: ``change(stored)`` gives the policy digest and passes
        of the next ledger (sequence one more, signed now), ``publish`` writes it to the
        registry, and it is stored. Nothing is stored when ``publish`` raises."""
        with self._transaction() as connection:
            stored = _stored(connection, registry, model)
            digest, passes = change(stored)
            ledger = Ledger(model, digest, (stored.sequence if stored else 0) + 1,
                            now_text(), dict(passes))  # fmt: skip
            publish(ledger)
            connection.execute(
                "INSERT OR REPLACE INTO ledgers VALUES (?, ?, ?, ?, ?, ?)",
                (registry, model, digest, ledger.sequence, ledger.signed_at,
                 json.dumps(ledger.passes)),
            )  # fmt: skip
        return ledger

    def charge(
        self, registry: str, model: str, policy_digest: str, version: str, *,
        limit: int, window: float, now: float,
    ) -> float | None:  # fmt: skip
        """Record one judgement of ``model`` under ``policy_digest`` unless ``limit`` were
        recorded in the ``window`` seconds before ``now``: None when recorded, else when
        (seconds since the epoch) the oldest of those leaves the window."""
        with self._transaction() as connection:
            times = [row[0] for row in connection.execute(
                "SELECT at FROM judgements WHERE registry = ? AND model = ? AND "
                "policy_digest = ? AND at > ? ORDER BY at",
                (registry, model, policy_digest, now - window),
            )]  # fmt: skip
            if len(times) >= limit:
                return times[len(times) - limit] + window
            connection.execute(
                "INSERT INTO judgements VALUES (?, ?, ?, ?, ?)",
                (registry, model, policy_digest, str(version), now),
            )
        return None

    def refund(self, registry: str, model: str, version: str) -> None:
        """Forget the latest judgement of ``version`` recorded by :meth:`charge` (one that
        ended without a verdict publishes no number)."""
        with self._transaction() as connection:
            connection.execute(
                "DELETE FROM judgements WHERE rowid = (SELECT rowid FROM judgements WHERE "
                "registry = ? AND model = ? AND version = ? ORDER BY at DESC LIMIT 1)",
                (registry, model, str(version)),
            )


def _stored(connection: sqlite3.Connection, registry: str, model: str) -> Ledger | None:
    row = connection.execute(
        "SELECT policy_digest, sequence, signed_at, passes FROM ledgers "
        "WHERE registry = ? AND model = ?", (registry, model),
    ).fetchone()  # fmt: skip
    if row is None:
        return None
    digest, sequence, signed_at, passes = row
    return Ledger(model, digest, int(sequence), signed_at, json.loads(passes))

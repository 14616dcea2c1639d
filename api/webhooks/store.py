"""``WebhookStore``: endpoints, deliveries with their attempt logs, and the fan-out cursor.

Two implementations behind one protocol, like the key store (``api/keys.py``): ``SqliteWebhookStore``
(embedded, ``<data_dir>/webhooks.db``) and ``RedisWebhookStore`` (distributed, ``api/webhooks/
redis_store.py``). Both translate "cannot answer now" into ``BackendUnavailable`` with the queue's rules.

Several senders may share one store (every API replica runs one by default): ``claim_due`` hands a due
delivery to one of them by pushing its next attempt ``lease_s`` ahead, so a sender killed mid-send
leaves it due again after the lease, never lost; ``add_delivery`` is insert-if-absent on the
delivery's derived id, so two fan-outs over one event make one delivery.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from api.webhooks.models import Delivery, DeliveryState, Endpoint
from foundation.queue.sqlite.db import SqliteFile
from foundation.queue.unavailable import sqlite_unavailable

if TYPE_CHECKING:
    import sqlite3

__all__ = ["LOG_KEPT", "RETENTION", "SqliteWebhookStore", "WebhookStore", "epoch_ms"]

LOG_KEPT = 1000  # deliveries kept per endpoint for its log; older finished ones are dropped
RETENTION = timedelta(days=7)  # finished deliveries are kept at most this long


def epoch_ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


class WebhookStore(Protocol):
    def add_endpoint(self, endpoint: Endpoint, *, max_per_project: int) -> bool:
        """Store a new endpoint unless its project has ``max_per_project`` already (False), in one step."""
        ...

    def get_endpoint(self, endpoint_id: str) -> Endpoint | None: ...

    def list_endpoints(self, project: str | None = None) -> list[Endpoint]:
        """Oldest first."""
        ...

    def save_endpoint(self, endpoint: Endpoint) -> None:
        """Overwrite a stored endpoint (its failure run, its disabled state)."""
        ...

    def remove_endpoint(self, endpoint_id: str) -> bool: ...

    def add_delivery(self, delivery: Delivery) -> bool:
        """Store a new pending delivery, due at once; False (nothing changed) if its id exists."""
        ...

    def get_delivery(self, delivery_id: str) -> Delivery | None: ...

    def list_deliveries(self, endpoint_id: str, limit: int = 50) -> list[Delivery]:
        """The endpoint's deliveries, newest first."""
        ...

    def claim_due(self, now: datetime, *, lease_s: float, limit: int) -> list[Delivery]:
        """Pending deliveries due at ``now``, each pushed ``lease_s`` ahead so no other sender takes it."""
        ...

    def save_delivery(self, delivery: Delivery) -> None:
        """Write a delivery after an attempt (or a redelivery): pending ones are due at
        ``next_attempt_at``, finished ones leave the schedule."""
        ...

    def defer(self, delivery_ids: list[str], until: datetime) -> None:
        """Make claimed pending deliveries due again at ``until``, in one step, their records untouched
        (a sender whose slots for their endpoint or project are taken hands them back)."""
        ...

    def cursor(self) -> str | None:
        """The id of the last queue event fanned out (``ApiQueue.events(after=...)``)."""
        ...

    def set_cursor(self, cursor: str) -> None: ...

    def close(self) -> None: ...


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS webhook_endpoints (
        id TEXT PRIMARY KEY, project TEXT NOT NULL, record TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS webhook_deliveries (
        id TEXT PRIMARY KEY, endpoint_id TEXT NOT NULL, created_ms INTEGER NOT NULL,
        state TEXT NOT NULL, due_ms INTEGER, record TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS webhook_due ON webhook_deliveries (due_ms) WHERE due_ms IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS webhook_log ON webhook_deliveries (endpoint_id, created_ms)",
    "CREATE TABLE IF NOT EXISTS webhook_cursor (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


def _due_ms(delivery: Delivery) -> int | None:
    if delivery.state is not DeliveryState.pending:
        return None
    return epoch_ms(delivery.next_attempt_at or delivery.created_at)


class SqliteWebhookStore:
    """Webhooks in their own SQLite file beside the queue's, through the queue's ``SqliteFile``."""

    @sqlite_unavailable
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = SqliteFile(str(self.path), synchronous="FULL")
        with self._db.tx() as conn:
            for statement in _SCHEMA:
                conn.execute(statement)

    # ------------------------------------------------------------------------------------ endpoints
    @sqlite_unavailable
    def add_endpoint(self, endpoint: Endpoint, *, max_per_project: int) -> bool:
        # BEGIN IMMEDIATE (tx) holds the write lock from the count to the insert: no other writer between.
        with self._db.tx() as conn:
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM webhook_endpoints WHERE project = ?", (endpoint.project,)
            ).fetchone()
            if count >= max_per_project:
                return False
            conn.execute(
                "INSERT INTO webhook_endpoints VALUES (?, ?, ?)",
                (endpoint.id, endpoint.project, endpoint.model_dump_json()),
            )
        return True

    @sqlite_unavailable
    def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        row = self._db.conn().execute("SELECT record FROM webhook_endpoints WHERE id = ?", (endpoint_id,)).fetchone()
        return Endpoint.model_validate_json(row[0]) if row else None

    @sqlite_unavailable
    def list_endpoints(self, project: str | None = None) -> list[Endpoint]:
        sql, args = "SELECT record FROM webhook_endpoints", tuple[str, ...]()
        if project is not None:
            sql, args = sql + " WHERE project = ?", (project,)
        rows = self._db.conn().execute(sql + " ORDER BY rowid", args).fetchall()
        return [Endpoint.model_validate_json(r[0]) for r in rows]

    @sqlite_unavailable
    def save_endpoint(self, endpoint: Endpoint) -> None:
        with self._db.tx() as conn:
            conn.execute(
                "UPDATE webhook_endpoints SET record = ? WHERE id = ?", (endpoint.model_dump_json(), endpoint.id)
            )

    @sqlite_unavailable
    def remove_endpoint(self, endpoint_id: str) -> bool:
        with self._db.tx() as conn:
            removed = conn.execute("DELETE FROM webhook_endpoints WHERE id = ?", (endpoint_id,)).rowcount
            conn.execute("DELETE FROM webhook_deliveries WHERE endpoint_id = ?", (endpoint_id,))
        return bool(removed)

    # ----------------------------------------------------------------------------------- deliveries
    @sqlite_unavailable
    def add_delivery(self, delivery: Delivery) -> bool:
        with self._db.tx() as conn:
            added = conn.execute(
                "INSERT OR IGNORE INTO webhook_deliveries VALUES (?, ?, ?, ?, ?, ?)",
                (
                    delivery.id,
                    delivery.endpoint_id,
                    epoch_ms(delivery.created_at),
                    delivery.state.value,
                    _due_ms(delivery),
                    delivery.model_dump_json(),
                ),
            ).rowcount
            if added:
                self._prune(conn, delivery.endpoint_id, delivery.created_at)
        return bool(added)

    def _prune(self, conn: sqlite3.Connection, endpoint_id: str, now: datetime) -> None:
        """Finished deliveries past the retention or beyond the log's length (pending ones stay)."""
        conn.execute(
            "DELETE FROM webhook_deliveries WHERE endpoint_id = ? AND due_ms IS NULL AND created_ms < ?",
            (endpoint_id, epoch_ms(now - RETENTION)),
        )
        conn.execute(
            """DELETE FROM webhook_deliveries WHERE endpoint_id = ? AND due_ms IS NULL AND created_ms < (
                SELECT created_ms FROM webhook_deliveries WHERE endpoint_id = ?
                ORDER BY created_ms DESC LIMIT 1 OFFSET ?)""",
            (endpoint_id, endpoint_id, LOG_KEPT - 1),
        )

    @sqlite_unavailable
    def get_delivery(self, delivery_id: str) -> Delivery | None:
        row = self._db.conn().execute("SELECT record FROM webhook_deliveries WHERE id = ?", (delivery_id,)).fetchone()
        return Delivery.model_validate_json(row[0]) if row else None

    @sqlite_unavailable
    def list_deliveries(self, endpoint_id: str, limit: int = 50) -> list[Delivery]:
        rows = (
            self._db.conn()
            .execute(
                "SELECT record FROM webhook_deliveries WHERE endpoint_id = ? ORDER BY created_ms DESC, id LIMIT ?",
                (endpoint_id, limit),
            )
            .fetchall()
        )
        return [Delivery.model_validate_json(r[0]) for r in rows]

    @sqlite_unavailable
    def claim_due(self, now: datetime, *, lease_s: float, limit: int) -> list[Delivery]:
        now_ms = epoch_ms(now)
        with self._db.tx() as conn:
            rows = conn.execute(
                "SELECT id, record FROM webhook_deliveries WHERE due_ms IS NOT NULL AND due_ms <= ? "
                "ORDER BY due_ms LIMIT ?",
                (now_ms, limit),
            ).fetchall()
            conn.executemany(
                "UPDATE webhook_deliveries SET due_ms = ? WHERE id = ?",
                [(now_ms + int(lease_s * 1000), r[0]) for r in rows],
            )
        return [Delivery.model_validate_json(r[1]) for r in rows]

    @sqlite_unavailable
    def save_delivery(self, delivery: Delivery) -> None:
        with self._db.tx() as conn:
            conn.execute(
                "UPDATE webhook_deliveries SET state = ?, due_ms = ?, record = ? WHERE id = ?",
                (delivery.state.value, _due_ms(delivery), delivery.model_dump_json(), delivery.id),
            )

    @sqlite_unavailable
    def defer(self, delivery_ids: list[str], until: datetime) -> None:
        with self._db.tx() as conn:
            conn.executemany(
                "UPDATE webhook_deliveries SET due_ms = ? WHERE id = ? AND due_ms IS NOT NULL",
                [(epoch_ms(until), i) for i in delivery_ids],
            )

    # --------------------------------------------------------------------------------------- cursor
    @sqlite_unavailable
    def cursor(self) -> str | None:
        row = self._db.conn().execute("SELECT value FROM webhook_cursor WHERE name = 'events'").fetchone()
        return str(row[0]) if row else None

    @sqlite_unavailable
    def set_cursor(self, cursor: str) -> None:
        with self._db.tx() as conn:
            conn.execute("INSERT OR REPLACE INTO webhook_cursor VALUES ('events', ?)", (cursor,))

    @sqlite_unavailable
    def close(self) -> None:
        self._db.close()

"""``WebhookStore``: endpoints, deliveries with their attempt logs, the fan-out cursor, and what per-request
webhooks need: each generation's ``RequestWebhook``, each project's signing secret, and the failure runs of
the origins per-request deliveries go to (endpoints of their own, kept while they matter).

Two implementations behind one protocol, like the key store (``api/api_keys.py``): ``SqliteWebhookStore``
(embedded, ``<data_dir>/webhooks.db``) and ``RedisWebhookStore`` (distributed, ``api/webhooks/
redis_store.py``). Both translate "cannot answer now" into ``BackendUnavailable`` with the queue's rules.

Several senders may share one store (every API replica runs one by default): ``claim_due`` hands a due
delivery to one of them by pushing its next attempt ``lease_s`` ahead, so a sender killed mid-send
leaves it due again after the lease, never lost; ``add_delivery`` is insert-if-absent on the
delivery's derived id, so two fan-outs over one event make one delivery.

The schedule is kept per project, and a claim goes across the projects with due work (the one whose
oldest due delivery waited longest first), taking at most ``per_project`` of each and none of the
projects the sender names as full: one project's backlog of due deliveries (a receiver that never
answers, a flood of events) is never ahead of another project's next delivery.

Nothing here grows without a bound: a request webhook is kept ``REQUEST_RETENTION`` from its create, an
origin's failure run ``RETENTION`` from its last write; a project's secret lives as long as its project.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from api.webhooks.models import Delivery, DeliveryState, Endpoint, ProjectSecret, RequestWebhook
from foundation.queue.sqlite.db import SqliteFile
from foundation.queue.unavailable import sqlite_unavailable

if TYPE_CHECKING:
    import sqlite3

__all__ = ["LOG_KEPT", "REQUEST_RETENTION", "RETENTION", "SqliteWebhookStore", "WebhookStore", "epoch_ms"]

LOG_KEPT = 1000  # deliveries kept per endpoint for its log; older finished ones are dropped
RETENTION = timedelta(days=7)  # finished deliveries are kept at most this long
# A generation's own webhook is kept this long after its create: a job not finished by then sends no more.
REQUEST_RETENTION = timedelta(days=30)


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

    def claim_due(
        self,
        now: datetime,
        *,
        lease_s: float,
        limit: int,
        per_project: int | None = None,
        skip: Collection[str] = (),
    ) -> list[Delivery]:
        """Up to ``limit`` pending deliveries due at ``now``, each pushed ``lease_s`` ahead so no other
        sender takes it: at most ``per_project`` of one project (None: no bound), none of the projects in
        ``skip``, the projects whose oldest due delivery is oldest first, each project's in due order."""
        ...

    def save_delivery(self, delivery: Delivery) -> None:
        """Write a delivery after an attempt (or a redelivery): pending ones are due at
        ``next_attempt_at``, finished ones leave the schedule."""
        ...

    def defer(self, deliveries: list[Delivery], until: datetime) -> None:
        """Make claimed pending deliveries due again at ``until``, in one step, their records untouched
        (a sender whose slots for their endpoint or project are taken hands them back); one finished
        meanwhile stays finished."""
        ...

    def cursor(self) -> str | None:
        """The id of the last queue event fanned out (``ApiQueue.events(after=...)``)."""
        ...

    def set_cursor(self, cursor: str) -> None: ...

    def add_request_webhook(self, hook: RequestWebhook) -> None:
        """Store a generation's own webhook (before its job is enqueued)."""
        ...

    def get_request_webhook(self, generation_id: str) -> RequestWebhook | None: ...

    def get_origin(self, origin_id: str) -> Endpoint | None:
        """The stored failure run of a per-request origin (``models.origin_id``); None: no failure kept."""
        ...

    def save_origin(self, origin: Endpoint) -> None:
        """Store an origin's failure run (kept ``RETENTION`` from this write)."""
        ...

    def get_project_secret(self, project: str) -> ProjectSecret | None: ...

    def add_project_secret(self, secret: ProjectSecret) -> bool:
        """Store the project's first secret unless it has one (False), in one step: concurrent first uses
        agree on one secret."""
        ...

    def save_project_secret(self, secret: ProjectSecret) -> None:
        """Overwrite the project's secret (a rotation, a reseal)."""
        ...

    def list_project_secrets(self) -> list[ProjectSecret]: ...

    def close(self) -> None: ...


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS webhook_endpoints (
        id TEXT PRIMARY KEY, project TEXT NOT NULL, record TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS webhook_deliveries (
        id TEXT PRIMARY KEY, endpoint_id TEXT NOT NULL, created_ms INTEGER NOT NULL,
        state TEXT NOT NULL, due_ms INTEGER, record TEXT NOT NULL, project TEXT)""",
    "DROP INDEX IF EXISTS webhook_due",  # the one due order of all projects, before the schedule per project
    "CREATE INDEX IF NOT EXISTS webhook_log ON webhook_deliveries (endpoint_id, created_ms)",
    "CREATE TABLE IF NOT EXISTS webhook_cursor (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS webhook_requests (
        generation_id TEXT PRIMARY KEY, created_ms INTEGER NOT NULL, record TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS webhook_requests_age ON webhook_requests (created_ms)",
    """CREATE TABLE IF NOT EXISTS webhook_origins (
        id TEXT PRIMARY KEY, saved_ms INTEGER NOT NULL, record TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS webhook_origins_age ON webhook_origins (saved_ms)",
    "CREATE TABLE IF NOT EXISTS webhook_project_secrets (project TEXT PRIMARY KEY, record TEXT NOT NULL)",
)

# The schedule per project; made after a file written before it gained its ``project`` column.
_DUE_INDEX = (
    "CREATE INDEX IF NOT EXISTS webhook_due_project ON webhook_deliveries (project, due_ms) WHERE due_ms IS NOT NULL"
)

# The projects with a pending delivery and the due time of each one's oldest, walked along the index one
# project at a time (a skip scan): as many index seeks as projects, however long one project's backlog.
_DUE_PROJECTS = """
WITH RECURSIVE p(project) AS (
    SELECT (SELECT project FROM webhook_deliveries WHERE due_ms IS NOT NULL ORDER BY project LIMIT 1)
    UNION ALL
    SELECT (SELECT project FROM webhook_deliveries WHERE due_ms IS NOT NULL AND project > p.project
            ORDER BY project LIMIT 1)
    FROM p WHERE p.project IS NOT NULL
)
SELECT project, head FROM (
    SELECT project, (SELECT due_ms FROM webhook_deliveries d WHERE d.project = p.project AND d.due_ms IS NOT NULL
                     ORDER BY due_ms LIMIT 1) AS head
    FROM p WHERE project IS NOT NULL
) WHERE head <= ? ORDER BY head
"""


def _add_project_column(conn: sqlite3.Connection) -> None:
    """A file from before the schedule per project: each delivery's project copied out of its record."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(webhook_deliveries)")}
    if "project" not in columns:
        conn.execute("ALTER TABLE webhook_deliveries ADD COLUMN project TEXT")
        conn.execute("UPDATE webhook_deliveries SET project = json_extract(record, '$.project')")


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
            _add_project_column(conn)
            conn.execute(_DUE_INDEX)

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
                "INSERT OR IGNORE INTO webhook_deliveries "
                "(id, endpoint_id, created_ms, state, due_ms, record, project) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    delivery.id,
                    delivery.endpoint_id,
                    epoch_ms(delivery.created_at),
                    delivery.state.value,
                    _due_ms(delivery),
                    delivery.model_dump_json(),
                    delivery.project,
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
    def claim_due(
        self,
        now: datetime,
        *,
        lease_s: float,
        limit: int,
        per_project: int | None = None,
        skip: Collection[str] = (),
    ) -> list[Delivery]:
        now_ms = epoch_ms(now)
        each = limit if per_project is None else per_project
        with self._db.tx() as conn:
            rows: list[tuple[str, str]] = []
            for project, _ in conn.execute(_DUE_PROJECTS, (now_ms,)).fetchall():
                take = min(each, limit - len(rows))
                if take <= 0:
                    break
                if project in skip:
                    continue
                rows += conn.execute(
                    "SELECT id, record FROM webhook_deliveries WHERE project = ? AND due_ms IS NOT NULL "
                    "AND due_ms <= ? ORDER BY due_ms LIMIT ?",
                    (project, now_ms, take),
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
    def defer(self, deliveries: list[Delivery], until: datetime) -> None:
        with self._db.tx() as conn:
            conn.executemany(
                "UPDATE webhook_deliveries SET due_ms = ? WHERE id = ? AND due_ms IS NOT NULL",
                [(epoch_ms(until), d.id) for d in deliveries],
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

    # ------------------------------------------------------------------------------ request webhooks
    @sqlite_unavailable
    def add_request_webhook(self, hook: RequestWebhook) -> None:
        with self._db.tx() as conn:
            conn.execute(
                "DELETE FROM webhook_requests WHERE created_ms < ?", (epoch_ms(hook.created_at - REQUEST_RETENTION),)
            )
            conn.execute(
                "INSERT OR REPLACE INTO webhook_requests VALUES (?, ?, ?)",
                (hook.generation_id, epoch_ms(hook.created_at), hook.model_dump_json()),
            )

    @sqlite_unavailable
    def get_request_webhook(self, generation_id: str) -> RequestWebhook | None:
        row = (
            self._db.conn()
            .execute("SELECT record FROM webhook_requests WHERE generation_id = ?", (generation_id,))
            .fetchone()
        )
        return RequestWebhook.model_validate_json(row[0]) if row else None

    @sqlite_unavailable
    def get_origin(self, origin_id: str) -> Endpoint | None:
        row = self._db.conn().execute("SELECT record FROM webhook_origins WHERE id = ?", (origin_id,)).fetchone()
        return Endpoint.model_validate_json(row[0]) if row else None

    @sqlite_unavailable
    def save_origin(self, origin: Endpoint) -> None:
        now = datetime.now(UTC)
        with self._db.tx() as conn:
            conn.execute("DELETE FROM webhook_origins WHERE saved_ms < ?", (epoch_ms(now - RETENTION),))
            conn.execute(
                "INSERT OR REPLACE INTO webhook_origins VALUES (?, ?, ?)",
                (origin.id, epoch_ms(now), origin.model_dump_json()),
            )

    @sqlite_unavailable
    def get_project_secret(self, project: str) -> ProjectSecret | None:
        row = (
            self._db.conn()
            .execute("SELECT record FROM webhook_project_secrets WHERE project = ?", (project,))
            .fetchone()
        )
        return ProjectSecret.model_validate_json(row[0]) if row else None

    @sqlite_unavailable
    def add_project_secret(self, secret: ProjectSecret) -> bool:
        with self._db.tx() as conn:
            added = conn.execute(
                "INSERT OR IGNORE INTO webhook_project_secrets VALUES (?, ?)",
                (secret.project, secret.model_dump_json()),
            ).rowcount
        return bool(added)

    @sqlite_unavailable
    def save_project_secret(self, secret: ProjectSecret) -> None:
        with self._db.tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO webhook_project_secrets VALUES (?, ?)",
                (secret.project, secret.model_dump_json()),
            )

    @sqlite_unavailable
    def list_project_secrets(self) -> list[ProjectSecret]:
        rows = self._db.conn().execute("SELECT record FROM webhook_project_secrets ORDER BY project").fetchall()
        return [ProjectSecret.model_validate_json(r[0]) for r in rows]

    @sqlite_unavailable
    def close(self) -> None:
        self._db.close()

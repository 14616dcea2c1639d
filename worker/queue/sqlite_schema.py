"""Tables of the embedded SQLite queue (one file, WAL, safe for several processes on one machine).

``SCHEMA`` creates what is missing; ``migrate`` then adds the columns a file from an older version
lacks (``ALTER TABLE ... ADD COLUMN``), inside the open's write transaction: processes opening one
file at once take turns, and each finds the work done by the first. Times in ``mono`` columns are
``CLOCK_MONOTONIC`` seconds (``sqlite_clock``); ``epoch`` ones are wall clock.
"""

from __future__ import annotations

import sqlite3

__all__ = ["SCHEMA", "migrate"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id               TEXT PRIMARY KEY,
    model            TEXT NOT NULL,
    project          TEXT NOT NULL,
    status           TEXT NOT NULL,              -- mirrors record.status, for queries
    attempt          INTEGER NOT NULL DEFAULT 0, -- mirrors record.attempt: the fencing number
    released         INTEGER NOT NULL DEFAULT 0, -- releases (drains) do not use up attempts
    cancel           INTEGER NOT NULL DEFAULT 0, -- the flag a worker polls at every step
    record           TEXT NOT NULL,              -- GenerationRecord JSON
    created_ms       REAL NOT NULL,              -- listing order (epoch ms: record.created_at)
    ready_at         REAL,                       -- queued: when it is claimable (mono, the file's boot)
    queue_seq        INTEGER,                    -- queued: tie-break of ready_at, else NULL
    token            TEXT,                       -- running: the claim's token, else NULL
    lease_expires_at REAL,                       -- running: the lease deadline (mono, of lease_boot)
    lease_boot       TEXT                        -- running: the boot of that deadline, else NULL
);
CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (model, status, ready_at, queue_seq);
CREATE INDEX IF NOT EXISTS jobs_seq ON jobs (queue_seq);
CREATE INDEX IF NOT EXISTS jobs_project ON jobs (project, created_ms, id);
CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (status, lease_expires_at);

CREATE TABLE IF NOT EXISTS events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  TEXT NOT NULL,
    status  TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at      TEXT NOT NULL,
    reason  TEXT
);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id, id);

CREATE TABLE IF NOT EXISTS dead_letters (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  TEXT NOT NULL,
    model   TEXT NOT NULL,
    reason  TEXT NOT NULL,
    code    TEXT,
    message TEXT,
    at      TEXT NOT NULL,
    raw     TEXT
);

CREATE TABLE IF NOT EXISTS idempotency (
    project      TEXT NOT NULL,
    key          TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    expires_at   REAL NOT NULL,                  -- epoch: 24 h must hold across reboots
    PRIMARY KEY (project, key)
);

CREATE TABLE IF NOT EXISTS workers (
    worker_id  TEXT PRIMARY KEY,
    beat       TEXT NOT NULL,
    expires_at REAL NOT NULL                     -- mono, the file's boot
);

-- One row: the boot whose monotonic clock ready_at and workers.expires_at are on (sqlite_clock.rebase).
CREATE TABLE IF NOT EXISTS clock (
    boot_id TEXT NOT NULL
);
"""

# Columns added after the first release: (table, column, declaration). Never removed or reordered.
_ADDED = (("jobs", "lease_boot", "TEXT"),)


def migrate(conn: sqlite3.Connection) -> None:
    """Add the columns of ``_ADDED`` that the file lacks (run inside a write transaction)."""
    for table, column, declaration in _ADDED:
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")

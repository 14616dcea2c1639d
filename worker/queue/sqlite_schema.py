"""Tables of the embedded SQLite queue (one file, WAL, safe for several processes on one machine)."""

from __future__ import annotations

__all__ = ["SCHEMA"]

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
    created_ms       REAL NOT NULL,              -- listing order
    ready_at         REAL,                       -- queued: when it is claimable (epoch s), else NULL
    queue_seq        INTEGER,                    -- queued: tie-break of ready_at, else NULL
    token            TEXT,                       -- running: the claim's token, else NULL
    lease_expires_at REAL                        -- running: the lease (epoch s), else NULL
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
    expires_at   REAL NOT NULL,
    PRIMARY KEY (project, key)
);

CREATE TABLE IF NOT EXISTS workers (
    worker_id  TEXT PRIMARY KEY,
    beat       TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""

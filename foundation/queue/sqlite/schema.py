"""Tables of the embedded SQLite queue (one file, WAL, safe for several processes on one machine).

``SCHEMA`` creates what is missing; ``migrate`` then adds the columns a file from an older version
lacks (``ALTER TABLE ... ADD COLUMN``), inside the open's write transaction: processes opening one
file at once take turns, and each finds the work done by the first. Times in ``mono`` columns are
``CLOCK_MONOTONIC`` seconds (``sqlite_clock``); ``epoch`` ones are wall clock.
"""

from __future__ import annotations

import sqlite3

__all__ = ["AFTER_MIGRATE", "SCHEMA", "migrate"]

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
    lease_boot       TEXT,                       -- running: the boot of that deadline, else NULL
    model_seq        INTEGER,                    -- queued: its place in queue_counts.added (position)
    ended_ms         REAL                        -- terminal: when it ended (epoch ms; retention)
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

-- Stage/progress writes of running attempts (base.ProgressNote), in write order: what the live event
-- stream replays between status events. Deleted with the job's events.
CREATE TABLE IF NOT EXISTS progress_notes (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id   TEXT NOT NULL,
    attempt  INTEGER NOT NULL,
    stage    TEXT NOT NULL,
    progress REAL NOT NULL,
    at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS progress_notes_job ON progress_notes (job_id, id);

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

-- Per model: queued rows now, and rows that ever (re)entered the queue (each entry's model_seq is
-- this count when it entered). Kept by the triggers of AFTER_MIGRATE, so every write path counts.
CREATE TABLE IF NOT EXISTS queue_counts (
    model   TEXT PRIMARY KEY,
    waiting INTEGER NOT NULL DEFAULT 0,
    added   INTEGER NOT NULL DEFAULT 0
);

-- Fair share (foundation/queue/fairness.py): one row per project with queued jobs in a model's pool, its
-- virtual pass (the claim serves the lowest); a row goes when the claim finds its project's queue empty.
CREATE TABLE IF NOT EXISTS fair_projects (
    model   TEXT NOT NULL,
    project TEXT NOT NULL,
    pass    REAL NOT NULL,
    PRIMARY KEY (model, project)
);
CREATE INDEX IF NOT EXISTS fair_projects_pass ON fair_projects (model, pass, project);
-- Projects whose queue ran dry owing part of their last turn (pass above the clock): where they rejoin.
CREATE TABLE IF NOT EXISTS fair_resting (
    model   TEXT NOT NULL,
    project TEXT NOT NULL,
    pass    REAL NOT NULL,
    PRIMARY KEY (model, project)
);
-- Per model: the pass the last served job started from (where a project with new work joins).
CREATE TABLE IF NOT EXISTS fair_clock (
    model  TEXT PRIMARY KEY,
    vclock REAL NOT NULL
);
-- A project's queued jobs in claim order and its running count, without a scan of the pool.
CREATE INDEX IF NOT EXISTS jobs_fair ON jobs (model, project, status, ready_at, queue_seq);

-- One row: the boot whose monotonic clock ready_at and workers.expires_at are on (sqlite_clock.rebase).
CREATE TABLE IF NOT EXISTS clock (
    boot_id TEXT NOT NULL
);
"""

# Columns added after the first release: (table, column, declaration). Never removed or reordered.
# ``record_format``: the record format of the version that wrote the row (``records.RECORD_FORMAT``; NULL: 1).
_ADDED = (
    ("jobs", "lease_boot", "TEXT"),
    ("jobs", "model_seq", "INTEGER"),
    ("jobs", "ended_ms", "REAL"),
    ("jobs", "record_format", "INTEGER"),
    ("progress_notes", "preview", "TEXT"),  # a live preview sent with the write (base.ProgressNote.preview JSON)
)

# What needs the added columns: created after ``migrate`` added them. A row enters the queue when
# ``queue_seq`` is set (every queued write sets a fresh one) and leaves it when it is cleared or the
# row is deleted; ``queue_counts`` follows, and the entering row gets its ``model_seq``. One statement
# per item: ``executescript`` would commit the open transaction first.
AFTER_MIGRATE = (
    "CREATE INDEX IF NOT EXISTS jobs_ended ON jobs (ended_ms)",
    # Rows a newer version wrote, found without a scan (``SqliteQueue._newer_pass``, NULLs sort first).
    "CREATE INDEX IF NOT EXISTS jobs_format ON jobs (record_format)",
    """CREATE TRIGGER IF NOT EXISTS jobs_queue_enter AFTER UPDATE OF queue_seq ON jobs
    WHEN NEW.queue_seq IS NOT NULL AND NEW.queue_seq IS NOT OLD.queue_seq
    BEGIN
        INSERT OR IGNORE INTO queue_counts (model) VALUES (NEW.model);
        UPDATE queue_counts SET added = added + 1, waiting = waiting + (OLD.queue_seq IS NULL)
            WHERE model = NEW.model;
        UPDATE jobs SET model_seq = (SELECT added FROM queue_counts WHERE model = NEW.model) WHERE id = NEW.id;
    END""",
    """CREATE TRIGGER IF NOT EXISTS jobs_queue_leave AFTER UPDATE OF queue_seq ON jobs
    WHEN NEW.queue_seq IS NULL AND OLD.queue_seq IS NOT NULL
    BEGIN
        UPDATE queue_counts SET waiting = waiting - 1 WHERE model = OLD.model;
    END""",
    """CREATE TRIGGER IF NOT EXISTS jobs_queue_delete AFTER DELETE ON jobs WHEN OLD.queue_seq IS NOT NULL
    BEGIN
        UPDATE queue_counts SET waiting = waiting - 1 WHERE model = OLD.model;
    END""",
)


def migrate(conn: sqlite3.Connection) -> None:
    """Add the columns of ``_ADDED`` that the file lacks, and what needs them (run inside a write
    transaction). A file from before ``queue_counts`` gets its counts from its queued rows, and those
    rows their ``model_seq`` in claim order; its terminal rows count as ended when they were created."""
    added: set[str] = set()
    for table, column, declaration in _ADDED:
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            added.add(column)
    if "model_seq" in added:
        conn.execute(
            """UPDATE jobs SET model_seq = ranked.n FROM (SELECT id, ROW_NUMBER() OVER
                   (PARTITION BY model ORDER BY ready_at, queue_seq) AS n FROM jobs WHERE queue_seq IS NOT NULL)
               AS ranked WHERE ranked.id = jobs.id"""
        )
        conn.execute(
            """INSERT OR REPLACE INTO queue_counts (model, waiting, added)
               SELECT model, COUNT(*), COUNT(*) FROM jobs WHERE queue_seq IS NOT NULL GROUP BY model"""
        )
    if "ended_ms" in added:
        conn.execute("UPDATE jobs SET ended_ms = created_ms WHERE status IN ('succeeded', 'failed', 'canceled')")
    for statement in AFTER_MIGRATE:
        conn.execute(statement)
    # Queued rows of a file from before fair share (or written while it was off) join the fair order at
    # the pool's clock: nothing queued before the upgrade is left out of the claim.
    conn.execute(
        """INSERT OR IGNORE INTO fair_projects (model, project, pass)
           SELECT DISTINCT j.model, j.project, COALESCE(c.vclock, 0) FROM jobs j
           LEFT JOIN fair_clock c ON c.model = j.model WHERE j.status = 'queued'"""
    )

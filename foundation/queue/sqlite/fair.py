"""Fair share on the SQLite queue: which project's job a claim takes (``foundation/queue/fairness.py``).

Tables ``fair_projects`` (a row per project with queued work in a pool, its pass) and ``fair_clock`` (the
pool's virtual clock) live in ``sqlite_schema``. Every function runs inside the caller's write
transaction, so a pick and the start it leads to are one atomic step across processes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from foundation.queue.fairness import FairShare, charge

__all__ = ["SCAN_PROJECTS", "candidates", "join", "queued_count", "served"]

# Projects a claim looks at, lowest pass first: past this many at their running cap (or with only
# retries in backoff), the claim finds nothing this time. Keeps a claim's cost flat in the project count.
SCAN_PROJECTS = 64


def join(conn: sqlite3.Connection, model: str, project: str) -> None:
    """``project`` has queued work in ``model``'s pool: give it a row, if it has none, at the pool's clock
    or at its resting pass when that is higher."""
    conn.execute(
        """INSERT OR IGNORE INTO fair_projects (model, project, pass)
           VALUES (?, ?, MAX(COALESCE((SELECT vclock FROM fair_clock WHERE model = ?), 0),
                             COALESCE((SELECT pass FROM fair_resting WHERE model = ? AND project = ?), 0)))""",
        (model, project, model, model, project),
    )
    conn.execute("DELETE FROM fair_resting WHERE model = ? AND project = ?", (model, project))


def queued_count(conn: sqlite3.Connection, model: str, project: str) -> int:
    """Jobs of ``project`` waiting in ``model``'s pool (retries in backoff included): the ``max_queued`` count."""
    row = conn.execute(
        "SELECT COUNT(*) FROM jobs WHERE model = ? AND project = ? AND status = 'queued'", (model, project)
    ).fetchone()
    return int(row[0])


def candidates(
    conn: sqlite3.Connection, model: str, now: float, readable: int, fair: FairShare
) -> Iterator[tuple[str, str, str]]:
    """``(job id, record, project)``: the next job of each project in fair order, lowest pass first,
    skipping projects at their ``max_running``. A project whose queue ran dry loses its row here."""
    projects = conn.execute(
        "SELECT project FROM fair_projects WHERE model = ? ORDER BY pass, project LIMIT ?", (model, SCAN_PROJECTS)
    ).fetchall()
    for (project,) in projects:
        running = conn.execute(
            "SELECT COUNT(*) FROM jobs WHERE model = ? AND project = ? AND status = 'running'", (model, project)
        ).fetchone()[0]
        if running >= fair.max_running_of(project):
            continue  # its jobs wait: never failed for the cap
        offered = None
        while True:  # the next head once the caller set an unreadable one aside
            head = conn.execute(
                """SELECT id, record FROM jobs WHERE model = ? AND project = ? AND status = 'queued'
                   AND ready_at <= ? AND (record_format IS NULL OR record_format <= ?)
                   ORDER BY ready_at, queue_seq LIMIT 1""",
                (model, project, now, readable),
            ).fetchone()
            if head is None or head[0] == offered:
                break
            offered = head[0]
            yield str(head[0]), str(head[1]), str(project)
        if head is None and queued_count(conn, model, project) == 0:
            conn.execute("DELETE FROM fair_projects WHERE model = ? AND project = ?", (model, project))


def served(conn: sqlite3.Connection, model: str, project: str, fair: FairShare, cost: float) -> None:
    """``project`` was served a job of ``cost`` (``fairness.job_cost``): its pass moves on by ``cost /
    weight``; the pool's clock is where it was."""
    row = conn.execute("SELECT pass FROM fair_projects WHERE model = ? AND project = ?", (model, project)).fetchone()
    start = float(row[0]) if row is not None else 0.0
    conn.execute(
        "INSERT OR REPLACE INTO fair_projects (model, project, pass) VALUES (?, ?, ?)",
        (model, project, charge(start, cost, fair.weight_of(project))),
    )
    conn.execute("INSERT OR REPLACE INTO fair_clock (model, vclock) VALUES (?, ?)", (model, start))
    # A resting pass at or below the clock says no more than joining at the clock does: dropped.
    conn.execute("DELETE FROM fair_resting WHERE model = ? AND pass <= ?", (model, start))
    waiting = conn.execute(
        "SELECT 1 FROM jobs WHERE model = ? AND project = ? AND status = 'queued' LIMIT 1", (model, project)
    ).fetchone()
    if waiting is None:  # its queue ran dry: off the list, resting with what it owes of this turn
        conn.execute("DELETE FROM fair_projects WHERE model = ? AND project = ?", (model, project))
        conn.execute(
            "INSERT OR REPLACE INTO fair_resting (model, project, pass) VALUES (?, ?, ?)",
            (model, project, charge(start, cost, fair.weight_of(project))),
        )

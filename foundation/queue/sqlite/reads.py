"""The read side of the SQLite backend: records, listings, depth, position, events, dead letters,
the cancel flag and worker heartbeats. Nothing here changes a job; ``sqlite_backend.SqliteQueue``
holds one and answers these calls through it. Every public method translates a locked or unreadable
database (``unavailable``). Heartbeat expiry is on the file's monotonic clock (``sqlite_clock``)."""

from __future__ import annotations

import functools
from collections.abc import Iterator

from foundation.core.contract import GenerationRecord, Stage, Status
from foundation.core.media import Preview
from foundation.queue import records
from foundation.queue.base import Backlog, DeadLetter, Event, JobPage, ProgressNote, WorkerHeartbeat, read_list_cursor
from foundation.queue.listing import Listed, page_of
from foundation.queue.sqlite.clock import Clock
from foundation.queue.sqlite.db import SqliteFile
from foundation.queue.unavailable import sqlite_unavailable

__all__ = ["SqliteReads"]


class SqliteReads:
    def __init__(
        self, db: SqliteFile, clock: Clock, *, fair: bool = False, record_format: int = records.RECORD_FORMAT
    ) -> None:
        self._db = db
        self._format = record_format  # the newest record format this version reads (``records.read``)
        self._clock = clock
        self._fair = fair  # claims take the fair order (foundation/queue/fairness.py): positions follow it

    @sqlite_unavailable
    def get(self, job_id: str) -> GenerationRecord | None:
        """``records.read`` of the row's record, in the format stored beside it (``NewerRecord``,
        ``UnreadableRecord`` name the row's project)."""
        row = (
            self._db.conn()
            .execute("SELECT record, record_format, project FROM jobs WHERE id = ?", (job_id,))
            .fetchone()
        )
        return None if row is None else self._read(*row)

    def _read(self, raw: str, stored_format: object, project: str | None) -> GenerationRecord:
        return records.read(raw, records.record_format(stored_format), project=project, readable=self._format)

    @sqlite_unavailable
    def list_page(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> JobPage:
        """Newest first (or oldest first), records this version cannot read left out and counted
        (``listing.page_of``). The cursor is ``list_cursor`` of the last job the page stepped over."""
        after = read_list_cursor(cursor) if cursor else None
        return page_of(self._listed(project, after, oldest_first, batch=limit + 1), limit)

    def list_jobs(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> tuple[list[GenerationRecord], str | None]:
        page = self.list_page(project, limit=limit, cursor=cursor, oldest_first=oldest_first)
        return page.records, page.next_cursor

    def _listed(
        self, project: str, after: tuple[float, str] | None, oldest_first: bool, *, batch: int
    ) -> Iterator[Listed]:
        """The project's rows in the listing's order from ``after`` on, ``batch`` rows per query."""
        beyond, order = (">", "ASC") if oldest_first else ("<", "DESC")
        while True:
            sql = "SELECT created_ms, id, record, record_format FROM jobs WHERE project = ?"
            args_: list[object] = [project]
            if after is not None:
                sql += f" AND (created_ms {beyond} ? OR (created_ms = ? AND id {beyond} ?))"
                args_ += [after[0], after[0], after[1]]
            sql += f" ORDER BY created_ms {order}, id {order} LIMIT ?"
            rows = self._db.conn().execute(sql, [*args_, batch]).fetchall()
            for created_ms, job_id, raw, fmt in rows:
                yield Listed(created_ms, job_id, functools.partial(self._read, raw, fmt, project))
            if len(rows) < batch:
                return
            after = (rows[-1][0], rows[-1][1])

    @sqlite_unavailable
    def position(self, job_id: str) -> int | None:
        """0-based place among the model's queued rows in claim order, ``(ready_at, queue_seq)``, from the
        counters of ``queue_counts`` (O(log n), as on Redis; see docs/queue-protocol.md):

        - waiting out a retry backoff: every queued row is ahead but those due after it, which are
          all still in their backoff too: counted exactly, over the rows in a backoff only;
        - due: every queued row is ahead but those that entered the queue after it (``added -
          model_seq``) and the earlier ones still in a backoff. A queued job canceled after this one
          entered counts as behind it, so each such cancel makes the figure one lower (never below 0).
        """
        conn = self._db.conn()
        row = conn.execute(
            """SELECT j.model, j.status, j.ready_at, j.queue_seq, j.model_seq, c.waiting, c.added
               FROM jobs j LEFT JOIN queue_counts c ON c.model = j.model WHERE j.id = ?""",
            (job_id,),
        ).fetchone()
        if row is None or row[1] != "queued" or row[5] is None:
            return None
        model, _, ready_at, queue_seq, model_seq, waiting, added = row
        now = self._clock.monotonic()
        if self._fair and ready_at <= now:
            return self._fair_position(job_id, model, int(waiting))
        if ready_at > now:
            behind = conn.execute(
                """SELECT COUNT(*) FROM jobs WHERE model = ? AND status = 'queued'
                   AND (ready_at > ? OR (ready_at = ? AND queue_seq > ?))""",
                (model, ready_at, ready_at, queue_seq),
            ).fetchone()[0]
        else:
            backing_off = conn.execute(
                """SELECT COUNT(*) FROM jobs WHERE model = ? AND status = 'queued' AND ready_at > ?
                   AND model_seq < ?""",
                (model, now, model_seq),
            ).fetchone()[0]
            behind = added - model_seq + backing_off
        return max(0, int(waiting) - 1 - int(behind))

    def _fair_position(self, job_id: str, model: str, waiting: int) -> int:
        """Under fair share, an upper bound of the jobs that start before this one, exact while every
        project with queued work has equal weight and a backlog at least as long as this job's place
        (docs/queue-protocol.md): ``r·N + k``, where ``r`` is the project's own due jobs ahead of it,
        ``N`` the projects with queued work and ``k`` those whose turn comes before this project's;
        never above the other waiting jobs. Index ranges only: no scan of other projects' jobs."""
        conn = self._db.conn()
        row = conn.execute(
            """SELECT j.project, j.ready_at, j.queue_seq, f.pass FROM jobs j
               LEFT JOIN fair_projects f ON f.model = j.model AND f.project = j.project WHERE j.id = ?""",
            (job_id,),
        ).fetchone()
        project, ready_at, queue_seq, pass_ = row
        # This job is due, so every row before it in (ready_at, queue_seq) is due too: the row value bounds the
        # index range at this job (a bound at ``now`` instead counted over every due row of the project).
        mine = conn.execute(
            """SELECT COUNT(*) FROM jobs WHERE model = ? AND project = ? AND status = 'queued'
               AND (ready_at, queue_seq) < (?, ?)""",
            (model, project, ready_at, queue_seq),
        ).fetchone()[0]
        projects, before = conn.execute(
            """SELECT COUNT(*), COALESCE(SUM(pass < ? OR (pass = ? AND project < ?)), 0)
               FROM fair_projects WHERE model = ?""",
            (pass_ or 0.0, pass_ or 0.0, project, model),
        ).fetchone()
        return max(0, min(waiting - 1, int(mine) * max(1, int(projects)) + int(before)))

    @sqlite_unavailable
    def backlog(self, model: str) -> Backlog:
        """Projects listed in fair order (or, fair share off, none counted: 0) and the oldest due row's wait."""
        conn = self._db.conn()
        now = self._clock.monotonic()
        first = conn.execute(
            "SELECT MIN(ready_at) FROM jobs WHERE model = ? AND status = 'queued' AND ready_at <= ?", (model, now)
        ).fetchone()[0]
        projects = conn.execute("SELECT COUNT(*) FROM fair_projects WHERE model = ?", (model,)).fetchone()[0]
        return Backlog(projects=int(projects), oldest_age_s=None if first is None else max(0.0, now - first))

    @sqlite_unavailable
    def depth(self, model: str) -> int:
        found = self._db.conn().execute("SELECT waiting FROM queue_counts WHERE model = ?", (model,)).fetchone()
        return 0 if found is None else int(found[0])

    @sqlite_unavailable
    def live_workers(self) -> list[WorkerHeartbeat]:
        # A read, never a write transaction: anyone may ask (GET /v1/models needs no key), and a write
        # here would queue every such call behind the queue's own writers. Lapsed beats are pruned by
        # the writes that ``heartbeat`` makes anyway.
        rows = (
            self._db.conn()
            .execute("SELECT beat FROM workers WHERE expires_at > ? ORDER BY worker_id", (self._clock.monotonic(),))
            .fetchall()
        )
        return [WorkerHeartbeat.model_validate_json(r[0]) for r in rows]

    @sqlite_unavailable
    def heartbeat(self, beat: WorkerHeartbeat, *, ttl_s: float) -> None:
        with self._db.tx() as conn:
            conn.execute("DELETE FROM workers WHERE expires_at <= ?", (self._clock.monotonic(),))
            conn.execute(
                "INSERT OR REPLACE INTO workers VALUES (?, ?, ?)",
                (beat.worker_id, beat.model_dump_json(), self._clock.monotonic() + ttl_s),
            )

    @sqlite_unavailable
    def events(self, job_id: str | None = None, *, after: str | None = None, limit: int = 1000) -> list[Event]:
        sql = "SELECT id, job_id, status, attempt, at, reason FROM events WHERE id > ?"
        args: list[object] = [int(after or 0)]
        if job_id is not None:
            sql += " AND job_id = ?"
            args.append(job_id)
        rows = self._db.conn().execute(sql + " ORDER BY id LIMIT ?", [*args, limit]).fetchall()
        return [Event(job_id=r[1], status=Status(r[2]), attempt=r[3], at=r[4], reason=r[5], id=str(r[0])) for r in rows]

    @sqlite_unavailable
    def progress_notes(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[ProgressNote]:
        rows = self._db.conn().execute(
            "SELECT id, attempt, stage, progress, at, preview FROM progress_notes"
            " WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?",
            (job_id, int(after or 0), limit),
        )
        return [
            ProgressNote(
                job_id=job_id,
                attempt=r[1],
                stage=Stage(r[2]),
                progress=r[3],
                at=r[4],
                id=str(r[0]),
                preview=Preview.model_validate_json(r[5]) if r[5] else None,
            )
            for r in rows
        ]

    @sqlite_unavailable
    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        cur = self._db.conn().execute(
            "SELECT id, job_id, model, reason, code, message, at, raw FROM dead_letters ORDER BY id LIMIT ?", (limit,)
        )
        names = [d[0] for d in cur.description]
        return [DeadLetter.model_validate({**dict(zip(names, row, strict=True)), "id": str(row[0])}) for row in cur]

    @sqlite_unavailable
    def cancel_requested(self, job_id: str) -> bool:
        row = self._db.conn().execute("SELECT cancel FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row[0])

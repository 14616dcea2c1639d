"""Embedded SQLite backend: the same semantics as Redis in one file, for one machine.

Every read-modify-write runs in ``BEGIN IMMEDIATE`` (one writer at a time, across processes, waiting
up to ``busy_timeout``), in WAL mode so readers never block. Each thread has its own connection
(the worker renews leases from a heartbeat thread). A lease is the ``lease_expires_at`` column
(wall clock, the holder's TTL; a running row with no lease counts as lapsed); fencing compares
``attempt`` and the claim's ``token``. A row this version cannot read is set aside. Statuses change
only through ``records``. Every public method (and opening the file) translates a locked or
unreadable database into ``BackendUnavailable`` (``unavailable.sqlite_unavailable``).
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from worker.core.contract import ErrorInfo, GenerationRecord, Stage, Status, utcnow
from worker.core.errors import IdempotencyConflict, UnknownJob
from worker.queue import keys, records
from worker.queue.base import Claim, DeadLetter, EnqueueResult, Event, Outcome, WorkerHeartbeat
from worker.queue.ordering import order_models
from worker.queue.policy import (
    DeadReason,
    EventReason,
    claimed_by,
    dead_event,
    finished_event,
    out_of_attempts,
    retry_event,
)
from worker.queue.records import UnreadableRecord
from worker.queue.sqlite_db import SqliteFile
from worker.queue.sqlite_schema import SCHEMA
from worker.queue.unavailable import sqlite_unavailable

__all__ = ["SqliteQueue"]

_POLL_S = 0.05  # how often a blocking claim looks again (there is no server to wake it)

# A fenced change: run inside the transaction with the current record and its release count.
_Change = Callable[[sqlite3.Connection, GenerationRecord, int], None]


class SqliteQueue:
    """``JobQueue`` on one SQLite file (embedded mode)."""

    @sqlite_unavailable
    def __init__(
        self,
        path: str | Path,
        *,
        lease_ttl_s: float = 30.0,
        max_attempts: int = 3,
        retry_backoff_s: float = 2.0,
        starve_after_s: float = 60.0,
        durable: bool = True,
    ) -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.lease_ttl_s = lease_ttl_s
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s  # the worker's backoff base; retry() takes the delay
        self.starve_after_s = starve_after_s
        self._db = SqliteFile(self.path, synchronous="FULL" if durable else "NORMAL")
        self._last_reclaim = float("-inf")
        self._db.conn().executescript(SCHEMA)

    # ------------------------------------------------------------------------------------ plumbing
    def _load(self, conn: sqlite3.Connection, job_id: str) -> tuple[GenerationRecord, int, str | None] | None:
        row = conn.execute("SELECT record, released, token FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        return records.parse(row[0]), int(row[1]), row[2]

    def _store(
        self,
        conn: sqlite3.Connection,
        rec: GenerationRecord,
        *,
        event: str | None = None,
        ready_at: float | None = None,
        token: str | None = None,
        released_incr: int = 0,
    ) -> None:
        """Write the record and its query columns; queue/lease columns follow the new status."""
        queued, running = rec.status is Status.queued, rec.status is Status.running
        conn.execute(
            """UPDATE jobs SET status = ?, attempt = ?, cancel = ?, record = ?, released = released + ?,
                   ready_at = ?, queue_seq = CASE WHEN ? THEN (SELECT COALESCE(MAX(queue_seq), 0) + 1 FROM jobs)
                   END, token = ?, lease_expires_at = ? WHERE id = ?""",
            (
                rec.status.value,
                rec.attempt,
                int(rec.cancel_requested),
                rec.model_dump_json(),
                released_incr,
                (ready_at if ready_at is not None else time.time()) if queued else None,
                queued,
                token if running else None,
                time.time() + self.lease_ttl_s if running else None,
                rec.id,
            ),
        )
        if event is not None:
            self._event(conn, rec, event)

    def _event(self, conn: sqlite3.Connection, rec: GenerationRecord, reason: str) -> None:
        conn.execute(
            "INSERT INTO events (job_id, status, attempt, at, reason) VALUES (?, ?, ?, ?, ?)",
            (rec.id, rec.status.value, rec.attempt, utcnow().isoformat(), reason),
        )

    def _dead(self, conn: sqlite3.Connection, job_id: str, model: str, reason: str, **extra: str | None) -> None:
        conn.execute(
            "INSERT INTO dead_letters (job_id, model, reason, code, message, at, raw) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (job_id, model, reason, extra.get("code"), extra.get("message"), utcnow().isoformat(), extra.get("raw")),
        )

    # ------------------------------------------------------------------------------------ API side
    @sqlite_unavailable
    def enqueue(
        self, record: GenerationRecord, *, idempotency_key: str | None = None, request_hash: str | None = None
    ) -> EnqueueResult:
        record = records.enqueued(record, max_attempts=self.max_attempts)
        now = time.time()
        with self._db.tx() as conn:
            if idempotency_key is not None:
                row = conn.execute(
                    "SELECT job_id, request_hash FROM idempotency WHERE project = ? AND key = ? AND expires_at > ?",
                    (record.project, idempotency_key, now),
                ).fetchone()
                if row is not None:
                    if row[1] != (request_hash or ""):
                        raise IdempotencyConflict(row[0])
                    stored = self._load(conn, row[0])
                    if stored is not None:
                        return EnqueueResult(stored[0], replayed=True)
                conn.execute(
                    "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?)",
                    (record.project, idempotency_key, record.id, request_hash or "", now + keys.IDEMPOTENCY_TTL_S),
                )
            existing = self._load(conn, record.id)
            if existing is not None:
                return EnqueueResult(existing[0], replayed=False)
            conn.execute(
                "INSERT INTO jobs (id, model, project, status, record, created_ms) VALUES (?, ?, ?, 'queued', ?, ?)",
                (
                    record.id,
                    record.model,
                    record.project,
                    record.model_dump_json(),
                    record.created_at.timestamp() * 1000,
                ),
            )
            self._store(conn, record, event=EventReason.enqueued, ready_at=now)
        return EnqueueResult(record, replayed=False)

    @sqlite_unavailable
    def get(self, job_id: str) -> GenerationRecord | None:
        row = self._db.conn().execute("SELECT record FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else GenerationRecord.model_validate_json(row[0])

    @sqlite_unavailable
    def list_jobs(
        self, project: str, *, limit: int = 20, cursor: str | None = None
    ) -> tuple[list[GenerationRecord], str | None]:
        """Newest first. The cursor is ``<created ms>:<job id>`` of the last record returned."""
        sql = "SELECT record, created_ms, id FROM jobs WHERE project = ?"
        args_: list[object] = [project]
        if cursor:
            score, _, last_id = cursor.partition(":")
            sql += " AND (created_ms < ? OR (created_ms = ? AND id < ?))"
            args_ += [float(score), float(score), last_id]
        rows = (
            self._db.conn().execute(sql + " ORDER BY created_ms DESC, id DESC LIMIT ?", [*args_, limit + 1]).fetchall()
        )
        page = [GenerationRecord.model_validate_json(r[0]) for r in rows[:limit]]
        more = len(rows) > limit and bool(page)
        return page, (f"{rows[limit - 1][1]!r}:{rows[limit - 1][2]}" if more else None)

    @sqlite_unavailable
    def cancel(self, job_id: str) -> GenerationRecord:
        with self._db.tx() as conn:
            loaded = self._load(conn, job_id)
            if loaded is None:
                raise UnknownJob(job_id)
            rec = loaded[0]
            if rec.status is Status.queued:
                rec = records.canceled(rec)
                self._store(conn, rec, event=EventReason.canceled)
            elif rec.status is Status.running and not rec.cancel_requested:
                rec = records.with_cancel_flag(rec)
                # Only the record and the flag: the lease stays the worker's.
                conn.execute("UPDATE jobs SET record = ?, cancel = 1 WHERE id = ?", (rec.model_dump_json(), job_id))
                self._event(conn, rec, EventReason.cancel_requested)
            return rec

    @sqlite_unavailable
    def depth(self, model: str) -> int:
        row = self._db.conn().execute("SELECT COUNT(*) FROM jobs WHERE model = ? AND status = 'queued'", (model,))
        return int(row.fetchone()[0])

    @sqlite_unavailable
    def position(self, job_id: str) -> int | None:
        conn = self._db.conn()
        row = conn.execute("SELECT model, status, ready_at, queue_seq FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or row[1] != "queued":
            return None
        ahead = conn.execute(
            """SELECT COUNT(*) FROM jobs WHERE model = ? AND status = 'queued'
               AND (ready_at < ? OR (ready_at = ? AND queue_seq < ?))""",
            (row[0], row[2], row[2], row[3]),
        ).fetchone()[0]
        return int(ahead)

    @sqlite_unavailable
    def live_workers(self) -> list[WorkerHeartbeat]:
        with self._db.tx() as conn:
            conn.execute("DELETE FROM workers WHERE expires_at <= ?", (time.time(),))
            rows = conn.execute("SELECT beat FROM workers ORDER BY worker_id").fetchall()
        return [WorkerHeartbeat.model_validate_json(r[0]) for r in rows]

    @sqlite_unavailable
    def heartbeat(self, beat: WorkerHeartbeat, *, ttl_s: float) -> None:
        with self._db.tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO workers VALUES (?, ?, ?)",
                (beat.worker_id, beat.model_dump_json(), time.time() + ttl_s),
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
    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        cur = self._db.conn().execute(
            "SELECT id, job_id, model, reason, code, message, at, raw FROM dead_letters ORDER BY id LIMIT ?", (limit,)
        )
        names = [d[0] for d in cur.description]
        return [DeadLetter.model_validate({**dict(zip(names, row, strict=True)), "id": str(row[0])}) for row in cur]

    # ------------------------------------------------------------------------------------ worker side
    @sqlite_unavailable
    def claim(
        self, worker_id: str, models: Sequence[str], *, prefer: Sequence[str] = (), block_s: float = 0.0
    ) -> Claim | None:
        hosted = list(dict.fromkeys(models))
        deadline = time.monotonic() + block_s
        while hosted:
            if time.monotonic() - self._last_reclaim >= self.lease_ttl_s / 2:  # a write lock: not every poll
                self._last_reclaim = time.monotonic()
                self.reclaim_expired()
            claim = self._claim_once(worker_id, hosted, prefer)
            if claim is not None or time.monotonic() >= deadline:
                return claim
            time.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))
        return None

    def _claim_once(self, worker_id: str, models: list[str], prefer: Sequence[str]) -> Claim | None:
        marks = ",".join("?" * len(models))
        with self._db.tx() as conn:
            now = time.time()
            rows = conn.execute(
                f"""SELECT model, MIN(ready_at) FROM jobs WHERE status = 'queued' AND ready_at <= ?
                    AND model IN ({marks}) GROUP BY model""",
                (now, *models),
            ).fetchall()
            for model in order_models({m: now - t for m, t in rows}, prefer, self.starve_after_s):
                for job_id, raw in conn.execute(
                    """SELECT id, record FROM jobs WHERE model = ? AND status = 'queued' AND ready_at <= ?
                       ORDER BY ready_at, queue_seq LIMIT 20""",
                    (model, now),
                ).fetchall():
                    try:
                        rec = records.parse(raw)
                    except UnreadableRecord as e:
                        self._set_aside(conn, job_id, model, e)  # never crash the consumer: go on
                        continue
                    rec = records.started(rec)
                    token = uuid.uuid4().hex
                    self._store(conn, rec, event=claimed_by(worker_id), token=token)
                    return Claim(rec.id, model, rec.attempt, rec, token=token)
        return None

    def _fenced(self, claim: Claim, change: _Change) -> bool:
        with self._db.tx() as conn:
            loaded = self._load(conn, claim.job_id)
            if loaded is None:
                return False
            rec, released, token = loaded
            if rec.status is not Status.running or rec.attempt != claim.attempt or token != claim.token:
                return False
            change(conn, rec, released)
            return True

    @sqlite_unavailable
    def renew(self, claim: Claim) -> bool:
        with self._db.tx() as conn:
            cur = conn.execute(
                """UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND status = 'running' AND attempt = ?
                   AND token = ?""",
                (time.time() + self.lease_ttl_s, claim.job_id, claim.attempt, claim.token),
            )
            return cur.rowcount == 1

    @sqlite_unavailable
    def progress(self, claim: Claim, stage: Stage, progress: float) -> bool:
        def change(conn: sqlite3.Connection, rec: GenerationRecord, released: int) -> None:
            conn.execute(
                "UPDATE jobs SET record = ? WHERE id = ?",
                (records.with_progress(rec, stage, progress).model_dump_json(), rec.id),
            )

        return self._fenced(claim, change)

    @sqlite_unavailable
    def cancel_requested(self, job_id: str) -> bool:
        row = self._db.conn().execute("SELECT cancel FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row[0])

    @sqlite_unavailable
    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        def change(conn: sqlite3.Connection, rec: GenerationRecord, released: int) -> None:
            event = finished_event(outcome.status, outcome.error.code if outcome.error else None)
            self._store(conn, records.finished(rec, outcome), event=event)

        return self._fenced(claim, change)

    @sqlite_unavailable
    def retry(self, claim: Claim, error: ErrorInfo, *, delay_s: float) -> bool:
        def change(conn: sqlite3.Connection, rec: GenerationRecord, released: int) -> None:
            if out_of_attempts(rec, released):
                self._fail_dead(conn, rec, error, DeadReason.out_of_attempts)
            else:
                requeued = records.requeued(rec, error=error)
                self._store(conn, requeued, event=retry_event(error.code), ready_at=time.time() + max(0.0, delay_s))

        return self._fenced(claim, change)

    @sqlite_unavailable
    def release(self, claim: Claim) -> bool:
        def change(conn: sqlite3.Connection, rec: GenerationRecord, released: int) -> None:
            # A drain is not a failure: it does not use up an attempt.
            self._store(conn, records.requeued(rec), event=EventReason.released, released_incr=1)

        return self._fenced(claim, change)

    def _fail_dead(self, conn: sqlite3.Connection, rec: GenerationRecord, error: ErrorInfo, reason: DeadReason) -> None:
        self._store(conn, records.dead_lettered(rec, error), event=dead_event(error.code, reason))
        self._dead(conn, rec.id, rec.model, reason, code=error.code.value, message=error.message)

    def _set_aside(self, conn: sqlite3.Connection, job_id: str, model: str, error: UnreadableRecord) -> None:
        """An unreadable row: a dead letter, the row kept as stored but out of every query (``unreadable``)."""
        self._dead(conn, job_id, model, DeadReason.invalid_record, message=error.detail, raw=error.raw[:2000])
        aside = "status = 'unreadable', ready_at = NULL, queue_seq = NULL, token = NULL, lease_expires_at = NULL"
        conn.execute(f"UPDATE jobs SET {aside} WHERE id = ?", (job_id,))

    @sqlite_unavailable
    def reclaim_expired(self) -> int:
        count = 0
        with self._db.tx() as conn:
            rows = conn.execute(
                # A running row with no lease at all (no token or no deadline) counts as lapsed too.
                """SELECT id, model FROM jobs WHERE status = 'running'
                   AND (lease_expires_at IS NULL OR lease_expires_at < ? OR token IS NULL) LIMIT 1000""",
                (time.time(),),
            ).fetchall()
            for job_id, model in rows:
                try:
                    loaded = self._load(conn, job_id)
                except UnreadableRecord as e:
                    self._set_aside(conn, job_id, model, e)
                    continue
                assert loaded is not None
                count += 1
                rec, released, _ = loaded
                if rec.cancel_requested:
                    ended = records.finished(rec, Outcome(status=Status.canceled))
                    self._store(conn, ended, event=EventReason.canceled_lease_lapsed)
                elif out_of_attempts(rec, released):
                    self._fail_dead(conn, rec, records.worker_lost(rec.attempt), DeadReason.worker_lost)
                else:
                    self._store(conn, records.requeued(rec), event=EventReason.lease_expired)
        return count

    def close(self) -> None:
        self._db.close()

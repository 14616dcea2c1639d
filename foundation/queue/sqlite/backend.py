"""Embedded SQLite backend: the same semantics as Redis in one file, for one machine.

Every read-modify-write runs in ``BEGIN IMMEDIATE`` (one writer at a time, across processes, waiting
up to ``busy_timeout``), in WAL mode so readers never block. Each thread has its own connection
(the worker renews leases from a heartbeat thread). A lease is the ``lease_expires_at`` column: the
holder's TTL on the monotonic clock of the boot in ``lease_boot``, so a wall-clock step moves no
lease (``sqlite_clock``); a running row with no lease, or a lease of another boot, counts as lapsed.
Fencing compares ``attempt`` and the claim's ``token``. A row this version cannot read is set aside; one
a newer version wrote (``record_format``) is never claimed here, and fails once it waited for a newer
worker past ``newer_record_wait_s`` (``_newer_pass``).
Statuses change only through ``records``; the reads live in ``sqlite_reads.SqliteReads``. Every
public method (and opening the file) translates a locked or unreadable database into
``BackendUnavailable`` (``unavailable.sqlite_unavailable``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from foundation.core.contract import ErrorInfo, GenerationRecord, Stage, Status, utcnow
from foundation.core.errors import ErrorCode, IdempotencyConflict, UnknownJob
from foundation.core.media import Preview
from foundation.queue import keys, records
from foundation.queue.base import (
    Backlog,
    Claim,
    DeadLetter,
    EnqueueResult,
    Event,
    JobPage,
    NewerRecordMet,
    Outcome,
    ProgressNote,
    ProgressWrite,
    WorkerHeartbeat,
)
from foundation.queue.errors import ProjectQueueFull, UnreadableRecord
from foundation.queue.fairness import FairShare, job_cost
from foundation.queue.newer import NewerNotes
from foundation.queue.ordering import order_models
from foundation.queue.policy import (
    DeadReason,
    EventReason,
    claimed_by,
    dead_event,
    finished_event,
    hung_error,
    out_of_attempts,
    release_uses_attempt,
    released_event,
    retry_event,
)
from foundation.queue.sqlite import fair as sqlite_fair
from foundation.queue.sqlite.clock import Clock, rebase
from foundation.queue.sqlite.db import SqliteFile
from foundation.queue.sqlite.group import GroupCommit
from foundation.queue.sqlite.reads import SqliteReads
from foundation.queue.sqlite.schema import SCHEMA, migrate
from foundation.queue.unavailable import sqlite_unavailable

__all__ = ["SqliteQueue"]

_POLL_S = 0.05  # how often a blocking claim looks again (there is no server to wake it)
# Retention: the newest events and dead letters kept (Redis caps each model's streams alike), and
# rows deleted per transaction by a purge, so writers wait for one short transaction at most.
EVENTS_CAP = 100_000
PROGRESS_NOTES_CAP = 1_000_000  # stage/progress writes kept at most (a few dozen per job)
DEAD_LETTERS_CAP = 100_000
_PURGE_BATCH = 1000

# One create: the record, its idempotency key and request hash (``enqueue``'s arguments).
Create = tuple[GenerationRecord, str | None, str | None]

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
        clock: Clock | None = None,
        record_ttl_s: float = keys.RECORD_TTL_S,
        newer_record_wait_s: float = 900.0,
        record_format: int = records.RECORD_FORMAT,
        fair: FairShare | None = None,
        group_commit: bool = False,
    ) -> None:
        self.path = str(path)
        self.fair = fair or FairShare()  # fair share by project per pool (sqlite_fair), or plain FIFO
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.lease_ttl_s = lease_ttl_s
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s  # the worker's backoff base; retry() takes the delay
        self.starve_after_s = starve_after_s
        self.record_ttl_s = record_ttl_s  # terminal rows and their events are purged this long after they ended
        self.newer_record_wait_s = newer_record_wait_s
        self._format = record_format  # written with every record; newer rows are left (a test opens two versions)
        self._newer = NewerNotes()
        self._db = SqliteFile(self.path, synchronous="FULL" if durable else "NORMAL")
        self._last_reclaim = float("-inf")
        self._claim_reclaims = 0  # re-queued by the claim path, reported by the next reclaim_expired
        self._reclaims_lock = threading.Lock()
        self._clock = clock or Clock()
        self.reads = SqliteReads(self._db, self._clock, fair=self.fair.enabled, record_format=self._format)
        self._creates: GroupCommit[tuple[GenerationRecord, str | None, str], EnqueueResult]
        self._creates = GroupCommit(self._db, self._create, shared=group_commit)
        try:
            self._db.conn().executescript(SCHEMA)
            with self._db.tx() as conn:  # once per file and boot, whoever opens first
                migrate(conn)  # also creates the queue counters' triggers (sqlite_schema.AFTER_MIGRATE)
                rebase(conn, self._clock)
        except BaseException:
            self._db.close()
            raise

    # ------------------------------------------------------------------------------------ plumbing
    def _load(self, conn: sqlite3.Connection, job_id: str) -> tuple[GenerationRecord, int, str | None] | None:
        row = conn.execute("SELECT record, released, token, record_format FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        return records.parse(row[0], records.record_format(row[3]), readable=self._format), int(row[1]), row[2]

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
            """UPDATE jobs SET status = ?, attempt = ?, cancel = ?, record = ?, record_format = ?,
                   released = released + ?, ready_at = ?,
                   queue_seq = CASE WHEN ? THEN (SELECT COALESCE(MAX(queue_seq), 0) + 1 FROM jobs) END,
                   token = ?, lease_expires_at = ?, lease_boot = ?, ended_ms = ? WHERE id = ?""",
            (
                rec.status.value,
                rec.attempt,
                int(rec.cancel_requested),
                rec.model_dump_json(),
                self._format,
                released_incr,
                (ready_at if ready_at is not None else self._clock.monotonic()) if queued else None,
                queued,
                token if running else None,
                self._clock.monotonic() + self.lease_ttl_s if running else None,
                self._clock.boot_id if running else None,
                self._clock.wall() * 1000 if rec.terminal else None,
                rec.id,
            ),
        )
        if queued and self.fair.enabled:  # (re-)entering the queue: its project is in the fair order
            sqlite_fair.join(conn, rec.model, rec.project)
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

    # ------------------------------------------------------------------------------------ reads
    def get(self, job_id: str) -> GenerationRecord | None:
        return self.reads.get(job_id)

    def list_jobs(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> tuple[list[GenerationRecord], str | None]:
        return self.reads.list_jobs(project, limit=limit, cursor=cursor, oldest_first=oldest_first)

    def list_page(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> JobPage:
        return self.reads.list_page(project, limit=limit, cursor=cursor, oldest_first=oldest_first)

    def backlog(self, model: str) -> Backlog:
        return self.reads.backlog(model)

    def depth(self, model: str) -> int:
        return self.reads.depth(model)

    def position(self, job_id: str) -> int | None:
        return self.reads.position(job_id)

    def live_workers(self) -> list[WorkerHeartbeat]:
        return self.reads.live_workers()

    def heartbeat(self, beat: WorkerHeartbeat, *, ttl_s: float) -> None:
        self.reads.heartbeat(beat, ttl_s=ttl_s)

    def events(self, job_id: str | None = None, *, after: str | None = None, limit: int = 1000) -> list[Event]:
        return self.reads.events(job_id, after=after, limit=limit)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return self.reads.dead_letters(limit)

    def progress_notes(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[ProgressNote]:
        return self.reads.progress_notes(job_id, after=after, limit=limit)

    def cancel_requested(self, job_id: str) -> bool:
        return self.reads.cancel_requested(job_id)

    # ------------------------------------------------------------------------------------ API side
    @sqlite_unavailable  # an error of its own write is handed back, not raised, by ``enqueue_many``
    def enqueue(
        self, record: GenerationRecord, *, idempotency_key: str | None = None, request_hash: str | None = None
    ) -> EnqueueResult:
        """Create a job (or find the one its idempotency key made): ``enqueue_many`` of one."""
        (outcome,) = self.enqueue_many([(record, idempotency_key, request_hash)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    @sqlite_unavailable
    def enqueue_many(self, creates: list[Create]) -> list[EnqueueResult | Exception]:
        """Create each ``(record, idempotency key, request hash)`` (or find the job its key made), in one
        transaction (``GroupCommit``; with ``group_commit``, shared with the creates of other threads: one
        fsync for all); each one's result, or the exception it raised (``IdempotencyConflict``), once it is
        committed."""
        enqueued = [
            (records.enqueued(r, max_attempts=self.max_attempts, idempotency_key=key), key, h or "")
            for r, key, h in creates
        ]
        return self._creates.run_many(enqueued)

    def _create(self, conn: sqlite3.Connection, create: tuple[GenerationRecord, str | None, str]) -> EnqueueResult:
        record, idempotency_key, request_hash = create
        now = self._clock.wall()  # the idempotency expiry: 24 h must hold across reboots
        if idempotency_key is not None:
            row = conn.execute(
                "SELECT job_id, request_hash FROM idempotency WHERE project = ? AND key = ? AND expires_at > ?",
                (record.project, idempotency_key, now),
            ).fetchone()
            if row is not None:
                if row[1] != request_hash:
                    raise IdempotencyConflict(row[0])
                stored = self._load(conn, row[0])
                if stored is not None:
                    return EnqueueResult(stored[0], replayed=True)
            conn.execute(
                "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?)",
                (record.project, idempotency_key, record.id, request_hash, now + keys.IDEMPOTENCY_TTL_S),
            )
        existing = self._load(conn, record.id)
        if existing is not None:
            return EnqueueResult(existing[0], replayed=False)
        cap = self.fair.max_queued_of(record.project)
        if self.fair.enabled and sqlite_fair.queued_count(conn, record.model, record.project) >= cap:
            raise ProjectQueueFull(record.project, record.model, cap)  # its savepoint drops the key too
        conn.execute(
            """INSERT INTO jobs (id, model, project, status, record, record_format, created_ms)
               VALUES (?, ?, ?, 'queued', ?, ?, ?)""",
            (
                record.id,
                record.model,
                record.project,
                record.model_dump_json(),
                self._format,
                record.created_at.timestamp() * 1000,
            ),
        )
        self._store(conn, record, event=EventReason.enqueued)
        return EnqueueResult(record, replayed=False)

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
    def delete(self, job_id: str) -> GenerationRecord:
        with self._db.tx() as conn:
            loaded = self._load(conn, job_id)
            if loaded is None:
                raise UnknownJob(job_id)
            rec = loaded[0]
            if not rec.terminal:
                return rec
            conn.execute("DELETE FROM events WHERE job_id = ?", (job_id,))
            conn.execute("DELETE FROM progress_notes WHERE job_id = ?", (job_id,))
            conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
            if rec.idempotency_key is not None:  # only while the key still names this job
                conn.execute(
                    "DELETE FROM idempotency WHERE project = ? AND key = ? AND job_id = ?",
                    (rec.project, rec.idempotency_key, job_id),
                )
            return rec

    # ------------------------------------------------------------------------------------ worker side
    @sqlite_unavailable
    def claim(
        self, worker_id: str, models: Sequence[str], *, prefer: Sequence[str] = (), block_s: float = 0.0
    ) -> Claim | None:
        hosted = list(dict.fromkeys(models))
        deadline = time.monotonic() + block_s
        while hosted:
            if self._clock.monotonic() - self._last_reclaim >= self.lease_ttl_s / 2:  # a write lock: not every poll
                self._last_reclaim = self._clock.monotonic()
                count = self._reclaim()
                with self._reclaims_lock:
                    self._claim_reclaims += count
            claim = self._claim_once(worker_id, hosted, prefer)
            if claim is not None or time.monotonic() >= deadline:
                return claim
            time.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))
        return None

    def _claim_once(self, worker_id: str, models: list[str], prefer: Sequence[str]) -> Claim | None:
        marks = ",".join("?" * len(models))
        with self._db.tx() as conn:
            now = self._clock.monotonic()
            # A row a newer version wrote is not this version's to run: left to newer workers (``_newer_pass``).
            rows = conn.execute(
                f"""SELECT model, MIN(ready_at) FROM jobs WHERE status = 'queued' AND ready_at <= ?
                    AND model IN ({marks}) AND (record_format IS NULL OR record_format <= ?) GROUP BY model""",
                (now, *models, self._format),
            ).fetchall()
            for model in order_models({m: now - t for m, t in rows}, prefer, self.starve_after_s):
                for job_id, raw, project in self._candidates(conn, model, now):
                    try:
                        rec = records.parse(raw)
                    except UnreadableRecord as e:
                        self._set_aside(conn, job_id, model, e)  # never crash the consumer: go on
                        continue
                    rec = records.started(rec)
                    token = uuid.uuid4().hex
                    self._store(conn, rec, event=claimed_by(worker_id), token=token)
                    if project is not None:
                        sqlite_fair.served(conn, model, project, self.fair, job_cost(rec))
                    return Claim(rec.id, model, rec.attempt, rec, token=token)
        return None

    def _candidates(self, conn: sqlite3.Connection, model: str, now: float) -> Iterator[tuple[str, str, str | None]]:
        """Jobs a claim may start, in the order to try them, with the project to charge: fair order
        (``sqlite_fair``; every queued row has its project's row: ``_store`` and, for rows from before fair
        share, ``sqlite_schema.migrate`` at open), or the pool's FIFO order when fair share is off."""
        if self.fair.enabled:
            yield from sqlite_fair.candidates(conn, model, now, self._format, self.fair)
            return
        for job_id, raw in conn.execute(
            """SELECT id, record FROM jobs WHERE model = ? AND status = 'queued' AND ready_at <= ?
               AND (record_format IS NULL OR record_format <= ?) ORDER BY ready_at, queue_seq LIMIT 20""",
            (model, now, self._format),
        ).fetchall():
            yield str(job_id), str(raw), None

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
                """UPDATE jobs SET lease_expires_at = ?, lease_boot = ? WHERE id = ? AND status = 'running'
                   AND attempt = ? AND token = ?""",
                (
                    self._clock.monotonic() + self.lease_ttl_s,
                    self._clock.boot_id,
                    claim.job_id,
                    claim.attempt,
                    claim.token,
                ),
            )
            return cur.rowcount == 1

    @sqlite_unavailable
    def progress(self, claim: Claim, stage: Stage, progress: float) -> bool:
        return self.write_progress(claim, stage, progress).accepted

    @sqlite_unavailable
    def write_progress(
        self,
        claim: Claim,
        stage: Stage,
        progress: float,
        *,
        passed: Sequence[Stage] = (),
        preview: Preview | None = None,
    ) -> ProgressWrite:
        found: list[bool] = []  # the cancel flag in the write's own transaction

        def change(conn: sqlite3.Connection, rec: GenerationRecord, released: int) -> None:
            found.append(rec.cancel_requested)
            conn.execute(
                "UPDATE jobs SET record = ? WHERE id = ?",
                (records.with_progress(rec, stage, progress).model_dump_json(), rec.id),
            )
            # A note at 0 for each stage passed since the last write, then this write's (as redis_plans.progress).
            notes = [*((s, 0.0, None) for s in passed), (stage, float(progress), preview)]
            at = utcnow().isoformat()
            conn.executemany(
                "INSERT INTO progress_notes (job_id, attempt, stage, progress, at, preview) VALUES (?, ?, ?, ?, ?, ?)",
                [(rec.id, rec.attempt, s.value, p, at, v.model_dump_json() if v else None) for s, p, v in notes],
            )

        if not self._fenced(claim, change):
            return ProgressWrite(accepted=False, cancel_requested=False)
        return ProgressWrite(accepted=True, cancel_requested=found[-1])

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
                self._store(
                    conn, requeued, event=retry_event(error.code), ready_at=self._clock.monotonic() + max(0.0, delay_s)
                )

        return self._fenced(claim, change)

    @sqlite_unavailable
    def release(self, claim: Claim, *, reason: str | None = None) -> bool:
        def change(conn: sqlite3.Connection, rec: GenerationRecord, released: int) -> None:
            # A drain or a worker's own fault is not the job's failure: it does not use up an attempt.
            # A hung job's does, and dead-letters the job when it was the last.
            uses_attempt = release_uses_attempt(reason)
            if uses_attempt and out_of_attempts(rec, released):
                self._fail_dead(conn, rec, hung_error(rec.attempt), DeadReason.worker_lost)
            else:
                incr = 0 if uses_attempt else 1
                self._store(conn, records.requeued(rec), event=released_event(reason), released_incr=incr)

        return self._fenced(claim, change)

    def _fail_dead(self, conn: sqlite3.Connection, rec: GenerationRecord, error: ErrorInfo, reason: DeadReason) -> None:
        self._store(conn, records.dead_lettered(rec, error), event=dead_event(error.code, reason))
        self._dead(conn, rec.id, rec.model, reason, code=error.code.value, message=error.message)

    def _set_aside(self, conn: sqlite3.Connection, job_id: str, model: str, error: UnreadableRecord) -> None:
        """A row of a format this version reads whose record does not validate: a dead letter with what was
        stored, and the job ended ``failed`` where every version reads it (``records.set_aside``: its text
        ``failed: record_unreadable`` when anything of it validates), out of the queue, its end an event and
        its row purged with the other ended ones (``ended_ms``). Never ``running`` for ever."""
        code = ErrorCode.record_unreadable
        dead = {"code": code.value, "message": error.detail, "raw": error.raw[:2000]}
        self._dead(conn, job_id, model, DeadReason.invalid_record, **dead)
        aside = "status = 'failed', record = ?, ended_ms = ?, ready_at = NULL, queue_seq = NULL, token = NULL"
        aside += ", lease_expires_at = NULL, lease_boot = NULL"
        conn.execute(
            f"UPDATE jobs SET {aside} WHERE id = ?", (records.set_aside(error.raw), self._clock.wall() * 1000, job_id)
        )
        conn.execute(
            """INSERT INTO events (job_id, status, attempt, at, reason)
               SELECT id, 'failed', attempt, ?, ? FROM jobs WHERE id = ?""",
            (utcnow().isoformat(), dead_event(code, DeadReason.invalid_record), job_id),
        )

    @sqlite_unavailable
    def reclaim_expired(self) -> int:
        count = self._reclaim()
        with self._reclaims_lock:  # and what this process's claims re-queued since the last call
            count, self._claim_reclaims = count + self._claim_reclaims, 0
        return count

    def _reclaim(self) -> int:
        count = 0
        with self._db.tx() as conn:
            rows = conn.execute(
                # A running row with no lease at all (no token, no deadline, no boot: written before
                # leases carried one) or a lease of another boot (its holder is gone) counts as lapsed.
                """SELECT id, model FROM jobs WHERE status = 'running' AND (token IS NULL
                   OR lease_expires_at IS NULL OR lease_boot IS NOT ? OR lease_expires_at < ?)
                   AND (record_format IS NULL OR record_format <= ?) LIMIT 1000""",
                (self._clock.boot_id, self._clock.monotonic(), self._format),
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
            count += self._newer_pass(conn)
        return count

    def _newer_pass(self, conn: sqlite3.Connection) -> int:
        """Rows a newer version wrote that wait for a worker: queued, or running with a lapsed lease. Left
        to newer workers (noted) until they waited ``newer_record_wait_s`` (queued: since they became due;
        running: since the lease lapsed); then no newer worker is there, and each ends ``failed:
        version_unavailable`` unread (``records.failed_unread``), dead-lettered. How many ended."""
        now, boot = self._clock.monotonic(), self._clock.boot_id
        rows = conn.execute(
            """SELECT id, model, record, record_format, status, attempt, ready_at, lease_expires_at, lease_boot
               FROM jobs WHERE record_format > ? AND status IN ('queued', 'running') LIMIT 1000""",
            (self._format,),
        ).fetchall()
        ended = 0
        for job_id, model, raw, fmt, status, attempt, ready_at, lease_end, lease_boot in rows:
            since = ready_at if status == "queued" else (lease_end if lease_boot == boot else None)
            if status == "running" and since is not None and since >= now:
                continue  # a newer worker holds it
            if since is not None:
                waited = now - since
            else:  # no lease, or one of another boot: waiting since its last write, by its own text
                written = records.last_written(raw)
                waited = (utcnow() - written).total_seconds() if written is not None else float("inf")
            if waited < self.newer_record_wait_s:
                self._newer.note(model, job_id, int(fmt), failed=False, waited_s=waited)
                continue
            code = ErrorCode.version_unavailable
            conn.execute(
                """UPDATE jobs SET status = 'failed', record = ?, ready_at = NULL, queue_seq = NULL, token = NULL,
                   lease_expires_at = NULL, lease_boot = NULL, ended_ms = ? WHERE id = ?""",
                (records.failed_unread(raw), self._clock.wall() * 1000, job_id),
            )
            conn.execute(
                "INSERT INTO events (job_id, status, attempt, at, reason) VALUES (?, 'failed', ?, ?, ?)",
                (job_id, attempt, utcnow().isoformat(), dead_event(code, DeadReason.newer_record)),
            )
            message = f"record format {fmt}: no worker of that version took it in {self.newer_record_wait_s:g} s"
            self._dead(conn, job_id, model, DeadReason.newer_record, code=code.value, message=message)
            self._newer.note(model, job_id, int(fmt), failed=True, waited_s=min(waited, 10.0**9))
            ended += 1
        return ended

    def newer_records(self) -> list[NewerRecordMet]:
        return self._newer.take()

    @sqlite_unavailable
    def purge_expired(self) -> int:
        """Terminal rows that ended ``record_ttl_s`` ago with their events, expired idempotency keys,
        and events and dead letters past their caps; in short transactions."""
        now = self._clock.wall()
        removed = 0
        while True:
            with self._db.tx() as conn:
                ids = conn.execute(
                    "SELECT id FROM jobs WHERE ended_ms < ? LIMIT ?", ((now - self.record_ttl_s) * 1000, _PURGE_BATCH)
                ).fetchall()
                conn.executemany("DELETE FROM events WHERE job_id = ?", ids)
                conn.executemany("DELETE FROM progress_notes WHERE job_id = ?", ids)
                conn.executemany("DELETE FROM jobs WHERE id = ?", ids)
            removed += len(ids)
            if len(ids) < _PURGE_BATCH:
                break
        with self._db.tx() as conn:
            removed += conn.execute("DELETE FROM idempotency WHERE expires_at <= ?", (now,)).rowcount
            caps = (("events", EVENTS_CAP), ("dead_letters", DEAD_LETTERS_CAP), ("progress_notes", PROGRESS_NOTES_CAP))
            for table, cap in caps:
                removed += conn.execute(
                    f"DELETE FROM {table} WHERE id <= (SELECT MAX(id) FROM {table}) - ?", (cap,)
                ).rowcount
        return removed

    def close(self) -> None:
        self._db.close()

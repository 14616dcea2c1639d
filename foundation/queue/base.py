"""The queue protocol: the one contract between the API tier and the workers.

Two backends implement it (``redis_backend.RedisQueue``, ``sqlite_backend.SqliteQueue``) and one
contract test suite runs against both. The queue is the only writer of a record's ``status``.

Each side sees only its half: the API tier holds an ``ApiQueue`` (create, read, cancel, list), a
worker a ``WorkerQueue`` (claim, lease, report); ``JobQueue`` is both, what a backend implements.
Every method raises ``foundation.core.errors.BackendUnavailable`` when the backend cannot answer now
(``unavailable``); no caller needs the client library's own exceptions.

Rules every backend keeps:
- **Leases, not timeouts.** ``claim`` grants a lease of ``lease_ttl_s``; ``renew`` extends it (called
  from a heartbeat thread the GPU loop cannot block). Only a lapsed lease makes a job deliverable again.
- **Fencing.** Each claim increments ``attempt``. ``renew``, ``progress``, ``finish``, ``retry`` and
  ``release`` take the ``Claim`` and are refused (return False) unless its attempt is the current one
  and the job is still ``running``. A stale attempt can never overwrite a newer one.
- **Every outcome is acknowledged.** Success, failure, cancel, dead letter: nothing stays ``running``.
- **Events.** Every status change appends an ``Event`` (in order per job) to the events log.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from foundation.core.contract import (
    Artifact,
    ErrorInfo,
    GenerationRecord,
    Money,
    PromptExtension,
    PromptTokens,
    Stage,
    Status,
    Usage,
)
from foundation.core.media import Preview

__all__ = [
    "ApiQueue",
    "AsyncApiQueue",
    "Backlog",
    "Claim",
    "DeadLetter",
    "EnqueueResult",
    "Event",
    "JobPage",
    "JobQueue",
    "NewerRecordMet",
    "Outcome",
    "Polled",
    "ProgressNote",
    "ProgressWrite",
    "WorkerHeartbeat",
    "WorkerQueue",
    "cursor_at",
    "list_cursor",
    "read_list_cursor",
]


@dataclass(frozen=True)
class Claim:
    """A worker's hold on one attempt of one job. Pass it back to every fenced call."""

    job_id: str
    model: str
    attempt: int
    record: GenerationRecord
    # Backend bookkeeping (stream entry id, consumer name, lease token); opaque to callers.
    token: str = ""


@dataclass(frozen=True)
class Backlog:
    """A model pool's waiting work as a worker's metrics show it (``WorkerQueue.backlog``)."""

    projects: int  # projects with queued work (fair share's list; may count one whose queue just ran dry)
    oldest_age_s: float | None  # age of the longest-waiting job that is due (None: nothing waits)


@dataclass(frozen=True)
class ProgressWrite:
    """What a fenced stage/progress write found (``WorkerQueue.write_progress``)."""

    accepted: bool  # False: the claim is stale (re-delivered or ended) and nothing was written
    cancel_requested: bool  # the job's cancel flag as the write found it (False when not accepted)


@dataclass(frozen=True)
class EnqueueResult:
    record: GenerationRecord
    replayed: bool  # True when an earlier request with the same idempotency key created it


@dataclass(frozen=True)
class Polled:
    """A record as the API serves it: the record and, while it is queued, its place in the queue."""

    record: GenerationRecord
    position: int | None  # ``ApiQueue.position``: 0-based while queued, else None
    replayed: bool = False  # from ``enqueue``: an earlier request with the same idempotency key made it


class Outcome(BaseModel):
    """What a worker reports when an attempt ends (``finish``)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal[Status.succeeded, Status.failed, Status.canceled]
    artifacts: list[Artifact] = Field(default_factory=list)
    usage: Usage | None = None
    price: Money | None = None
    actual_prompt: str | None = None
    prompt_extension: PromptExtension | None = None
    prompt_tokens: PromptTokens | None = None
    resumed_from_step: int | None = None  # the attempt resumed a denoising checkpoint (pipelines.runtime.resume)
    error: ErrorInfo | None = None


class Event(BaseModel):
    """One status change, appended to the events log."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    status: Status
    attempt: int
    at: datetime
    reason: str | None = None
    id: str = ""  # backend position (stream id / row id), for resuming a read


class ProgressNote(BaseModel):
    """One stage/progress write of a running attempt, kept in the job's own progress log.

    Status changes are ``Event``s; progress writes are not (they would flood the events feed that
    other readers page through), so each backend keeps them per job, in write order, for as long as
    the job's events: what the live event stream (``GET /v1/generations/{id}/events``) replays.
    A write may carry a live preview (at most about 20 KB, at most one per preview interval of the worker):
    it stays in the note, never on the record.
    """

    model_config = ConfigDict(extra="ignore")

    job_id: str
    attempt: int
    stage: Stage
    progress: float
    at: datetime
    id: str = ""  # backend position (stream id / row id), for resuming a read
    preview: Preview | None = None  # a live preview sent with this write (``event: preview`` on the stream)


class WorkerHeartbeat(BaseModel):
    """A live worker, as it reports itself every few seconds (kept with a TTL)."""

    model_config = ConfigDict(extra="ignore")

    worker_id: str
    # The models it takes jobs of now: what ``GET /v1/models`` reports as available. A hosted model that a
    # fault of this worker's own keeps it off (``worker.faults``: its weights do not load here, no ffmpeg, a
    # full disk...) is left out while the fault lasts, and listed in ``faulted_models`` instead.
    hosted_models: list[str]
    faulted_models: list[str] = Field(default_factory=list)
    # Per hosted model, the ``mode/variant``s it cannot run here: their weights (a variant LoRA) are missing.
    unserved_variants: dict[str, list[str]] = Field(default_factory=dict)
    loaded_models: list[str] = Field(default_factory=list)
    current_job: str | None = None
    ready: bool = False
    at: datetime | None = None

    def serves(self, model: str, mode: str, variant: str) -> bool:
        """Whether this worker hosts ``model`` and can run its ``mode``/``variant``."""
        return model in self.hosted_models and f"{mode}/{variant}" not in self.unserved_variants.get(model, ())


@dataclass(frozen=True)
class NewerRecordMet:
    """A record written by a newer version that a worker's queue met (``WorkerQueue.newer_records``)."""

    job_id: str
    model: str
    record_format: int
    failed: bool  # True: past ``queue.newer_record_wait_s``, failed and dead-lettered; False: left to newer workers
    waited_s: float  # how long it had waited for a worker of its version when met


class DeadLetter(BaseModel):
    """A job that ran out of attempts, or a stream entry that was no job, set aside with a reason."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str  # backend position (stream id / row id)
    job_id: str = ""  # "" for an unreadable entry that named no job
    model: str
    reason: str  # a ``policy.DeadReason`` value, or why an entry was unreadable
    at: datetime
    code: str | None = None  # out of attempts: the ``ErrorCode`` of the last failure
    message: str | None = None
    entry: str | None = None  # Redis, unreadable entry: its stream entry id
    raw: str | None = None  # unreadable entry or record: what was stored (cut to 2000 characters)


def list_cursor(record: GenerationRecord) -> str:
    """The cursor ``ApiQueue.list_jobs`` hands out after ``record`` (in either order): ``<created ms>:<job id>``.
    Both backends write it with this function, so a caller may resume a listing from a record it has (the
    Videos API's ``after=<id>``)."""
    return cursor_at(record.created_at.timestamp() * 1000, record.id)


def cursor_at(created_ms: float, job_id: str) -> str:
    """The listing's cursor after the job created at ``created_ms`` with id ``job_id`` (``list_cursor``)."""
    return f"{float(created_ms)!r}:{job_id}"


def read_list_cursor(cursor: str) -> tuple[float, str]:
    """A ``list_cursor`` as ``(created ms, job id)``; ``ValueError`` for anything else (the API answers 400).
    A cursor comes from a client: only finite ASCII numbers pass (``float`` reads more than we write:
    'nan', 'inf', '١', '1_0'; Redis refuses a NaN score with an error that is no "cannot answer")."""
    score, sep, last_id = cursor.partition(":")
    if not sep or not score.isascii() or "_" in score:
        raise ValueError(f"malformed list cursor {cursor!r}")
    value = float(score)
    if not math.isfinite(value):
        raise ValueError(f"list cursor {cursor!r} has no finite position")
    return value, last_id


@dataclass(frozen=True)
class JobPage:
    """One page of a project's listing (``ApiQueue.list_page``).

    ``skipped``: jobs of the stretch this page covers whose record this version cannot read (a newer
    version's during a rolling upgrade, or one that does not parse), left out of ``records`` and counted
    instead, so one such record never costs the whole listing. Each is counted on exactly one page."""

    records: list[GenerationRecord]
    next_cursor: str | None
    skipped: int = 0


class ApiQueue(Protocol):
    """What the API tier needs: create, read, cancel and list jobs; queue state; live workers."""

    def enqueue(
        self, record: GenerationRecord, *, idempotency_key: str | None = None, request_hash: str | None = None
    ) -> EnqueueResult:
        """Store a new ``queued`` record and make it claimable, atomically.

        With an idempotency key (scoped to ``record.project``, kept 24 h): the same key and hash return
        the original record with ``replayed=True``; the same key with another hash raises
        ``IdempotencyConflict``; concurrent calls with one key create exactly one job.
        """
        ...

    def get(self, job_id: str) -> GenerationRecord | None:
        """The stored record (``records.read``: one that ended unread or does not parse reads ``failed``);
        ``records.NewerRecord`` for a newer version's, ``records.UnreadableRecord`` for one that salvages to
        nothing, each naming the project stored beside it."""
        ...

    def list_jobs(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> tuple[list[GenerationRecord], str | None]:
        """The project's records, newest first (``oldest_first``: by creation, oldest first), and a cursor for
        the next page in the same order (None at the end; ``list_cursor``). ``ValueError`` for a cursor that is
        not one. Records this version cannot read are left out (``list_page`` counts them)."""
        ...

    def list_page(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> JobPage:
        """``list_jobs`` with the count of records left out because this version cannot read them. The cursor
        may stop after such a record; ``ValueError`` (``read_list_cursor``) for a cursor that is not one."""
        ...

    def cancel(self, job_id: str) -> GenerationRecord:
        """Queued: ends ``canceled`` now. Running: sets the durable cancel flag the worker polls.
        Terminal: returns the record unchanged (the caller decides on 409). Raises ``UnknownJob``."""
        ...

    def delete(self, job_id: str) -> GenerationRecord:
        """Remove a terminal job for good and return its record as it was: the record, its own events and
        progress notes, its place in the project's listing, the id → model index, and its idempotency key
        while the key still names it (a create repeated with that key then makes a new job). Afterwards
        ``get`` answers None, ``list_jobs`` skips it and ``cancel`` raises ``UnknownJob``. The model's events
        feed and dead letters keep their entries until their caps or TTL drop them. Artifact objects are the
        caller's to delete (the sweeper removes what is left once the record is gone). A job that is not
        terminal is left as it is and returned unchanged (the caller decides on 409). Raises ``UnknownJob``."""
        ...

    def depth(self, model: str) -> int:
        """Jobs of this model waiting to be claimed."""
        ...

    def position(self, job_id: str) -> int | None:
        """0-based place in its model's queue while queued, else None."""
        ...

    def live_workers(self) -> list[WorkerHeartbeat]:
        """Workers whose heartbeat has not expired."""
        ...

    def events(self, job_id: str | None = None, *, after: str | None = None, limit: int = 1000) -> list[Event]: ...

    def progress_notes(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[ProgressNote]:
        """The job's stage/progress writes after the note with id ``after``, oldest first ([] for an
        unknown job or one whose notes expired with it)."""
        ...

    def close(self) -> None: ...


class AsyncApiQueue(Protocol):
    """The API tier's queue, async only: every call a route makes is a coroutine it awaits on the event
    loop, never a blocking call on a thread. Same records, same errors (``BackendUnavailable``,
    ``IdempotencyConflict``, ``UnknownJob``, ``ValueError`` for a bad cursor) as ``ApiQueue``'s. ``poll`` and
    ``enqueue`` return the record with its position, which a backend may fetch in the same round trip."""

    async def poll(self, job_id: str) -> Polled | None:
        """``get`` and, while the job is queued, ``position``; None when there is no such job."""
        ...

    async def enqueue(
        self, record: GenerationRecord, *, idempotency_key: str | None = None, request_hash: str | None = None
    ) -> Polled:
        """``ApiQueue.enqueue`` (the same idempotency rules) and the stored record's position."""
        ...

    async def get(self, job_id: str) -> GenerationRecord | None: ...

    async def list_jobs(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> tuple[list[GenerationRecord], str | None]:
        """``ApiQueue.list_jobs``."""
        ...

    async def list_page(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> JobPage:
        """``ApiQueue.list_page``."""
        ...

    async def cancel(self, job_id: str) -> GenerationRecord:
        """``ApiQueue.cancel``."""
        ...

    async def delete(self, job_id: str) -> GenerationRecord:
        """``ApiQueue.delete``."""
        ...

    async def depth(self, model: str) -> int: ...

    async def position(self, job_id: str) -> int | None: ...

    async def live_workers(self) -> list[WorkerHeartbeat]: ...

    async def events(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[Event]: ...

    async def progress_notes(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[ProgressNote]:
        """``ApiQueue.progress_notes``."""
        ...

    async def aclose(self) -> None:
        """Release what this object holds (connections, threads); not the sync queue it may wrap."""
        ...


class WorkerQueue(Protocol):
    """What a worker needs: claim, keep the lease, report progress and the outcome, beat, reclaim."""

    def claim(
        self, worker_id: str, models: Sequence[str], *, prefer: Sequence[str] = (), block_s: float = 0.0
    ) -> Claim | None:
        """Take the next job of one of ``models`` (``running``, attempt+1, lease granted).

        ``prefer`` lists models already loaded: they are tried first, but a model waiting longer than
        the others is served so no model starves. Entries whose payload is unreadable are
        dead-lettered with a reason and acknowledged, never returned. Lapsed leases of other workers
        are reclaimed here as well. Waits up to ``block_s`` for work.
        """
        ...

    def renew(self, claim: Claim) -> bool:
        """Extend the lease. False: the claim is stale (re-delivered or finished) and must stop."""
        ...

    def progress(self, claim: Claim, stage: Stage, progress: float) -> bool:
        """Record stage/progress (fenced). False when the claim is stale."""
        ...

    def write_progress(
        self,
        claim: Claim,
        stage: Stage,
        progress: float,
        *,
        passed: Sequence[Stage] = (),
        preview: Preview | None = None,
    ) -> ProgressWrite:
        """``progress``, answering also the job's cancel flag as the write found it: a worker that
        writes a stage learns in the same call whether to stop (no separate ``cancel_requested``).

        ``passed``: stages entered and left at once since the last write (a resident model's
        ``loading``); each gets its progress note (at 0) before this write's, in the same write, and
        is never the record's stage. ``preview``: kept in this write's note (not on the record)."""
        ...

    def cancel_requested(self, job_id: str) -> bool: ...

    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        """End the attempt with a terminal status (fenced) and acknowledge it."""
        ...

    def retry(self, claim: Claim, error: ErrorInfo, *, delay_s: float) -> bool:
        """A transient failure: re-queue after ``delay_s``, or fail and dead-letter when the attempts
        are used up (keeping ``error``). Fenced."""
        ...

    def release(self, claim: Claim, *, reason: str | None = None) -> bool:
        """Give the job back for immediate re-delivery; ``reason`` goes into the event (``released: <reason>``).

        A drain (no reason) or a fault of this worker's own uses no attempt; ``hung`` (a job released
        by force at shutdown) uses one up, and when that was the last the job fails ``worker_lost`` and
        is dead-lettered (``policy.release_uses_attempt``). Fenced."""
        ...

    def reclaim_expired(self) -> int:
        """Re-queue (or dead-letter, when attempts are used up) jobs whose lease lapsed; count them,
        with those this queue object's claims re-queued since the last call (the claim path reclaims
        too), so a caller that counts these returns counts every reclaim of its process."""
        ...

    def newer_records(self) -> list[NewerRecordMet]:
        """Records written by a newer version that this queue object met since the last call (claims, the
        reaper, the sweep), each once while it waits: left to newer workers (its entry or row untouched, no
        attempt used), or failed once it waited past ``queue.newer_record_wait_s``. What the worker logs
        and counts (``genworker_newer_records_total``)."""
        ...

    def purge_expired(self) -> int:
        """Retention, run periodically by a worker: drop what outlived its keep time (terminal records
        and their events after ``record_ttl``, idempotency keys after 24 h, events and dead letters past
        their caps, consumers of stopped workers); how many items went. Cheap when there is nothing."""
        ...

    def get(self, job_id: str) -> GenerationRecord | None:
        """The record (the sweeper reads which objects a record points at)."""
        ...

    def heartbeat(self, beat: WorkerHeartbeat, *, ttl_s: float) -> None: ...

    def depth(self, model: str) -> int:
        """Jobs of this model waiting to be claimed (a worker exports it as a metric)."""
        ...

    def backlog(self, model: str) -> Backlog:
        """Who waits in this model's pool, for the worker's fair-share metrics (no per-project figure)."""
        ...

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Dead letters of every model, oldest first."""
        ...

    def close(self) -> None: ...


class JobQueue(ApiQueue, WorkerQueue, Protocol):
    """Both sides: what a backend implements and the contract suite tests."""

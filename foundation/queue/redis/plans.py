"""What ``commit.lua`` applies to one Redis job: a frozen ``Plan``, one named constructor per transition.

Every change to a job is: read the hash (``Snapshot``), build the whole plan here from it, and let
``commit.lua`` apply it only if ``rev`` did not move meanwhile (``redis_jobs.JobWriter``). A plan is
complete when built: nothing patches its fields afterwards. The constructors are pure (no I/O, the
clock only where a delay needs it), so each transition reads top to bottom in one place.

=================  ==============================  ============================================
constructor        status change                   stream / zset
=================  ==============================  ============================================
``create``         (new) → queued                  new entry
``start``          queued → running, attempt + 1   (the delivered entry stays pending)
``progress``       —  (fenced)                     —  (a note in the job's progress log)
``cancel_queued``  queued → canceled               ack the entry, leave the delayed zset
``cancel_flag``    — (running; sets the flag)      —
``finish``         running → terminal (fenced)     ack
``retry``          running → queued (fenced)       ack; park in the delayed zset or new entry
``release``        running → queued (fenced)       ack; new entry; ``released + 1`` unless it
                   (or ``dead_letter``, hung)      used up the attempt
``dead_letter``    running → failed                ack; dead-letter stream
``reclaim``        lapsed lease (reaper-owned):    ack; new entry unless the job ended
                   ``reclaim_unstarted``, ``_canceled``, ``_requeued`` or ``dead_letter``
``sweep``          running, no lease (as reclaim)  ack if any; new entry unless the job ended
``promote``        — (a due retry)                 leave the delayed zset, new entry
``promote_unread`` — (a newer version's due retry) leave the delayed zset, new entry
``fail_unread``    a newer version's record, past  ack; leave the delayed zset; dead-letter stream
                   the wait → failed (unread)
``set_aside``      a record that does not          ack if any; leave the delayed zset (the reaper
                   validate → failed               dead-letters it with what was stored)
=================  ==============================  ============================================

A newer version's record (``records.NewerRecord``) is never parsed: ``Unread`` is its hash as stored, and
the two ``_unread`` constructors change it without reading it (``records.failed_unread`` ends its text).
``set_aside`` ends a record of this version's formats that does not validate the same way, unparsed
(``records.set_aside`` ends its text).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import NotRequired, TypedDict

from foundation.core.contract import ErrorInfo, GenerationRecord, Stage, Status
from foundation.core.errors import ErrorCode
from foundation.core.media import Preview
from foundation.queue import keys, records
from foundation.queue.base import Claim, Outcome
from foundation.queue.fairness import FairShare, job_cost
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
from foundation.queue.redis.entries import encode_payload

__all__ = [
    "Plan",
    "Snapshot",
    "Unread",
    "cancel_flag",
    "cancel_queued",
    "create",
    "dead_letter",
    "fail_unread",
    "finish",
    "holds",
    "new_plan_id",
    "progress",
    "promote",
    "promote_unread",
    "reclaim",
    "reclaim_canceled",
    "reclaim_requeued",
    "reclaim_unstarted",
    "release",
    "retry",
    "set_aside",
    "split_token",
    "start",
    "sweep",
]


@dataclass(frozen=True)
class Snapshot:
    """A job hash as read before planning; ``rev`` is the check-and-set token."""

    record: GenerationRecord
    rev: int
    entry: str
    released: int


@dataclass(frozen=True)
class Unread:
    """A job hash whose record this version does not read (a newer version wrote it), as stored."""

    job_id: str
    model: str
    raw: str
    rev: int
    status: str
    attempt: int
    entry: str
    cancel: bool
    record_format: int


def new_plan_id() -> str:
    """128 random bits as 32 hex digits, the shape ``uuid4().hex`` gave (122 random bits), without a UUID
    object to build."""
    return os.urandom(16).hex()


@dataclass(frozen=True)
class Plan:
    """One change to one job, applied by ``commit.lua`` only if the stored ``rev`` is still ``rev``.

    Field by field what the script does is in ``redis_scripts.COMMIT`` and ``lua/commit.lua``.

    ``plan_id`` is unique per plan and stored on the job hash by the commit that applies it: a client
    that re-sends the call after losing the reply (a retry, a Cluster redirect) gets ``applied``
    instead of ``conflict``, so a commit is safe to run twice."""

    job_id: str
    model: str
    attempt: int
    rev: int = 0
    create: bool = False
    record: GenerationRecord | None = None  # the new record; None keeps the stored one
    raw_record: str | None = None  # the new record's text, for one this version does not read (``fail_unread``)
    newer: bool = False  # the stored record is a newer version's: its status may be one this table lacks
    status: Status | None = None  # None: no status change
    cancel: bool = False
    fence_attempt: int | None = None  # with fence_entry: refuse unless running at this attempt
    fence_entry: str | None = None
    owned_by: str | None = None  # refuse unless ``ack`` is still pending for this consumer
    unleased: bool = False  # refuse unless running with its entry pending for nobody (the sweep)
    ack: str | None = None  # entry to acknowledge and delete
    undelay: bool = False  # drop the job from the delayed zset
    delay_ms: int | None = None  # park the job in the delayed zset this long, due on the server's clock (TIME)
    payload: str | None = None  # add a new stream entry with this payload
    released_incr: int = 0
    event: str | None = None  # reason of the event to append (None: no event)
    dead: str | None = None  # reason of the dead letter to append (None: none)
    dead_code: str | None = None
    dead_message: str | None = None
    lease_ms: int | None = None  # a claim: the holder's lease, stored on the job hash
    # A progress write: (stage, progress) notes to append; the last may add a preview's JSON (stage, progress, preview).
    notes: tuple[tuple[str, ...], ...] | None = None
    # A create: the project and the job's cost (``fairness.job_cost``), kept on the job hash for fair share.
    project: str | None = None
    cost: float | None = None
    # A create under fair share (``fairness``): parked in the project's queue instead of a stream entry,
    # refused past ``max_queued`` (the weights and caps a commit needs come from ``Scripts``).
    park: str | None = None
    max_queued: int | None = None
    plan_id: str = field(default_factory=new_plan_id)


def split_token(token: str) -> tuple[str, str]:
    """A Redis claim's token is ``<entry id>|<consumer>``."""
    entry, _, consumer = token.partition("|")
    return entry, consumer


def holds(snap: Snapshot, claim: Claim) -> bool:
    """The fencing rule, checked in Python before planning and again in Lua by ``commit.lua``."""
    rec = snap.record
    return rec.status is Status.running and rec.attempt == claim.attempt and snap.entry == split_token(claim.token)[0]


def _payload(record: GenerationRecord) -> str:
    return encode_payload(record.id, record.model)


class _Target(TypedDict):
    """The ``Plan`` fields every change of a stored job carries (checked by mypy where unpacked)."""

    job_id: str
    model: str
    attempt: int
    rev: int
    record: GenerationRecord
    cancel: bool
    fence_attempt: NotRequired[int]
    fence_entry: NotRequired[str]


class _Guard(TypedDict, total=False):
    """Who may end a job its worker no longer holds: the reaper, on an entry it took (``owned_by``),
    or the sweep, on a running record whose entry is pending for nobody (``unleased``)."""

    owned_by: str
    unleased: bool


_REAPER: _Guard = {"owned_by": keys.REAPER_CONSUMER}
_SWEEP: _Guard = {"unleased": True}


def _on(snap: Snapshot, record: GenerationRecord, fence: Claim | None = None) -> _Target:
    """Who, which rev, the new record and, for a worker's write, the fence of its claim."""
    fields: _Target = {
        "job_id": record.id,
        "model": record.model,
        "attempt": record.attempt,
        "rev": snap.rev,
        "record": record,
        "cancel": record.cancel_requested,
    }
    if fence is not None:
        fields["fence_attempt"], fields["fence_entry"] = fence.attempt, split_token(fence.token)[0]
    return fields


# ------------------------------------------------------------------------------------------ API side
def create(record: GenerationRecord, fair: FairShare | None = None) -> Plan:
    """Enqueue: write the ``queued`` record and its stream entry (``exists`` if the id is taken); under
    fair share (``fair.enabled``) park it in its project's queue instead (``full`` past ``max_queued``)."""
    plan = Plan(
        job_id=record.id,
        model=record.model,
        attempt=0,
        create=True,
        record=record,
        status=Status.queued,
        payload=_payload(record),
        event=EventReason.enqueued,
        project=record.project,
        cost=job_cost(record),
    )
    if fair is None or not fair.enabled:
        return plan
    return replace(plan, payload=None, park=record.project, max_queued=fair.max_queued_of(record.project))


def cancel_queued(snap: Snapshot) -> Plan:
    """A queued job ends ``canceled`` at once: its entry (or delayed retry) goes, no worker gets it."""
    new = records.canceled(snap.record)
    return Plan(
        **_on(snap, new),
        status=Status.canceled,
        ack=snap.entry or None,
        undelay=True,
        event=EventReason.canceled,
    )


def cancel_flag(snap: Snapshot) -> Plan:
    """A running job gets the durable cancel flag its worker polls; the status stays ``running``."""
    return Plan(**_on(snap, records.with_cancel_flag(snap.record)), event=EventReason.cancel_requested)


# ------------------------------------------------------------------------------------------ worker side
def start(snap: Snapshot, new: GenerationRecord, worker_id: str, *, lease_ms: int | None = None) -> Plan:
    """Claim: ``new`` is ``records.started(snap.record)`` (the caller keeps it for the ``Claim``).

    ``lease_ms``: the claimer's lease, stored on the job hash so reapers measure the holder's lease."""
    return Plan(**_on(snap, new), status=Status.running, event=claimed_by(worker_id), lease_ms=lease_ms)


def progress(
    snap: Snapshot,
    new: GenerationRecord,
    claim: Claim,
    reported: float,
    passed: Sequence[Stage] = (),
    *,
    preview: Preview | None = None,
) -> Plan:
    """Stage and progress of the current attempt (fenced, no event), noted in the job's progress log
    with the progress as ``reported`` (the record keeps it clamped to 0..1), after a note at 0 for
    each stage ``passed`` since the last write (entered and left at once: never on the record).
    ``preview`` goes into this write's own note (its JSON as the note's third item), never the record."""
    last: tuple[str, ...] = (new.stage.value, repr(float(reported)))
    if preview is not None:
        last = (*last, preview.model_dump_json())
    notes = (*((s.value, repr(0.0)) for s in passed), last)
    return Plan(**_on(snap, new, claim), notes=notes)


def finish(snap: Snapshot, claim: Claim, outcome: Outcome) -> Plan:
    """The worker's terminal outcome of the current attempt; the entry is acknowledged."""
    code = outcome.error.code if outcome.error else None
    return Plan(
        **_on(snap, records.finished(snap.record, outcome), claim),
        status=outcome.status,
        ack=snap.entry,
        event=finished_event(outcome.status, code),
    )


def retry(snap: Snapshot, claim: Claim, error: ErrorInfo, *, delay_s: float) -> Plan:
    """A transient failure with attempts left: re-queue keeping ``error``, after ``delay_s``.

    With a delay the job waits in the delayed zset (the claim path promotes it when due); without,
    it gets a new stream entry at once. The due time is taken by ``commit.lua`` from the server's ``TIME``,
    the clock the claim path compares it with: a worker whose own clock is wrong delays no retry.
    Out of attempts is ``dead_letter`` (``policy.out_of_attempts``)."""
    delayed = delay_s > 0
    return Plan(
        **_on(snap, records.requeued(snap.record, error=error), claim),
        status=Status.queued,
        ack=snap.entry,
        delay_ms=max(1, round(delay_s * 1000)) if delayed else None,
        payload=None if delayed else _payload(snap.record),
        event=retry_event(error.code),
    )


def release(snap: Snapshot, claim: Claim, reason: str | None = None) -> Plan:
    """A worker gives the job back for re-delivery now. A drain or a fault of its own uses no attempt
    (``released + 1``); a hung job's release uses one, and dead-letters the job when that was its last
    (``policy.release_uses_attempt``, ``policy.out_of_attempts``)."""
    uses_attempt = release_uses_attempt(reason)
    if uses_attempt and out_of_attempts(snap.record, snap.released):
        return dead_letter(snap, hung_error(snap.record.attempt), DeadReason.worker_lost, fence=claim)
    return Plan(
        **_on(snap, records.requeued(snap.record), claim),
        status=Status.queued,
        ack=snap.entry,
        payload=_payload(snap.record),
        released_incr=0 if uses_attempt else 1,
        event=released_event(reason),
    )


def dead_letter(
    snap: Snapshot,
    error: ErrorInfo,
    reason: DeadReason,
    *,
    fence: Claim | None = None,
    owned_by: str | None = None,
    unleased: bool = False,
) -> Plan:
    """Out of attempts: ``failed`` with ``error``, the entry acknowledged, a dead letter appended.

    ``fence``: a worker's retry (fenced by its claim); ``owned_by``: the reaper, on a lapsed lease;
    ``unleased``: the sweep, on a running record with no lease."""
    return Plan(
        **_on(snap, records.dead_lettered(snap.record, error), fence),
        status=Status.failed,
        owned_by=owned_by,
        unleased=unleased,
        ack=snap.entry or None,
        event=dead_event(error.code, reason),
        dead=reason.value,
        dead_code=error.code.value,
        dead_message=error.message,
    )


# ------------------------------------------------------------------------------------------ reaper
def reclaim(snap: Snapshot, entry_id: str) -> Plan | None:
    """What the reaper does with the job of a lapsed entry; None when the entry is not the job's now
    (the job moved on or ended) or nothing is to be done."""
    rec = snap.record
    if snap.entry != entry_id or rec.terminal:
        return None
    if rec.status is Status.queued:  # its claimer stopped between XREADGROUP and the start
        return reclaim_unstarted(snap, entry_id)
    if rec.cancel_requested:
        return reclaim_canceled(snap, entry_id)
    if out_of_attempts(rec, snap.released):
        error = records.worker_lost(rec.attempt)
        return dead_letter(snap, error, DeadReason.worker_lost, owned_by=keys.REAPER_CONSUMER)
    return reclaim_requeued(snap, entry_id)


def reclaim_unstarted(snap: Snapshot, entry_id: str) -> Plan:
    """A lapsed entry whose job is still ``queued`` (its claimer stopped before starting it): a new
    entry replaces it, with no status change and no event."""
    return Plan(
        **_on(snap, snap.record),
        owned_by=keys.REAPER_CONSUMER,
        ack=entry_id,
        payload=_payload(snap.record),
    )


def reclaim_canceled(snap: Snapshot, entry_id: str | None, guard: _Guard = _REAPER) -> Plan:
    """A lapsed lease on a job asked to cancel: it ends ``canceled`` (nobody is running it)."""
    ended = records.finished(snap.record, Outcome(status=Status.canceled))
    return Plan(
        **_on(snap, ended),
        **guard,
        status=Status.canceled,
        ack=entry_id,
        event=EventReason.canceled_lease_lapsed,
    )


def reclaim_requeued(snap: Snapshot, entry_id: str | None, guard: _Guard = _REAPER) -> Plan:
    """A lapsed lease with attempts left: back to ``queued`` with a new entry."""
    return Plan(
        **_on(snap, records.requeued(snap.record)),
        **guard,
        status=Status.queued,
        ack=entry_id,
        payload=_payload(snap.record),
        event=EventReason.lease_expired,
    )


def sweep(snap: Snapshot) -> Plan | None:
    """A ``running`` record whose entry is pending for nobody: no worker holds a lease on it and no
    reaper would ever see it (a lost write, an entry acknowledged by mistake). Treated as a lapsed
    lease: re-queued, ended ``canceled`` or, out of attempts, dead-lettered ``worker_lost``. Its old
    entry, if still in the stream, is deleted. ``commit.lua`` re-checks "no pending entry" atomically."""
    rec = snap.record
    if rec.status is not Status.running:
        return None
    entry = snap.entry or None
    if rec.cancel_requested:
        return reclaim_canceled(snap, entry, _SWEEP)
    if out_of_attempts(rec, snap.released):
        return dead_letter(snap, records.worker_lost(rec.attempt), DeadReason.worker_lost, unleased=True)
    return reclaim_requeued(snap, entry, _SWEEP)


def promote(snap: Snapshot) -> Plan:
    """A retry whose backoff is over: out of the delayed zset, into the stream (record unchanged)."""
    rec = snap.record
    return Plan(job_id=rec.id, model=rec.model, attempt=rec.attempt, rev=snap.rev, undelay=True, payload=_payload(rec))


# ------------------------------------------------------------------------------------------ newer versions
def promote_unread(unread: Unread) -> Plan | None:
    """``promote`` for a due retry of a newer version's job, without reading its record: a new entry (which
    a worker of that version takes; an older one leaves it pending). None when it is not waiting to be due."""
    if unread.entry:
        return None
    return Plan(
        job_id=unread.job_id,
        model=unread.model,
        attempt=unread.attempt,
        rev=unread.rev,
        undelay=True,
        payload=encode_payload(unread.job_id, unread.model),
    )


def fail_unread(
    unread: Unread, message: str, *, entry: str | None, owned_by: str | None = None, unleased: bool = False
) -> Plan:
    """A newer version's job that no worker of that version took within ``queue.newer_record_wait_s``:
    ``failed: version_unavailable`` in its own text (``records.failed_unread``, its format kept), ``entry``
    acknowledged (``owned_by``: an entry the reaper took; ``unleased``: a running record nobody holds), out
    of the delayed zset, a dead letter saying why. Nobody will take it: it ends here, where a client sees it."""
    code = ErrorCode.version_unavailable
    return Plan(
        job_id=unread.job_id,
        model=unread.model,
        attempt=unread.attempt,
        rev=unread.rev,
        raw_record=records.failed_unread(unread.raw),
        newer=True,
        cancel=unread.cancel,
        status=Status.failed,
        owned_by=owned_by,
        unleased=unleased,
        ack=entry or None,
        undelay=True,
        event=dead_event(code, DeadReason.newer_record),
        dead=DeadReason.newer_record.value,
        dead_code=code.value,
        dead_message=message,
    )


def set_aside(unread: Unread) -> Plan:
    """A record in a format this version reads that does not validate: ``failed`` in a text every version
    reads (``records.set_aside``: ``record_unreadable``, the rest kept when it then validates), whatever
    status its hash holds, its entry acknowledged, out of the delayed zset, its end an event (the reaper
    writes the dead letter, with what was stored). Never left ``running`` for ever."""
    code = ErrorCode.record_unreadable
    return Plan(
        job_id=unread.job_id,
        model=unread.model,
        attempt=unread.attempt,
        rev=unread.rev,
        raw_record=records.set_aside(unread.raw),
        newer=True,  # its hash's status may be none this table knows: only to failed, as for a newer record
        cancel=unread.cancel,
        status=Status.failed,
        ack=unread.entry or None,
        undelay=True,
        event=dead_event(code, DeadReason.invalid_record),
    )

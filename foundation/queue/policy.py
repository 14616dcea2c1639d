"""Queue policies written once for both backends: when a job is out of attempts, which releases use
one up, and the reason strings of events and dead letters (``docs/queue-protocol.md`` cites this module).

The Lua scripts never decide either: Python builds the plan (``redis_plans``) from a snapshot, and
``commit.lua`` applies it only if the job's ``rev`` did not move since, so the decision taken here
is the one stored.
"""

from __future__ import annotations

from enum import StrEnum

from foundation.core.contract import ErrorInfo, GenerationRecord, Status
from foundation.core.errors import ErrorCode

__all__ = [
    "DeadReason",
    "EventReason",
    "ReleaseReason",
    "claimed_by",
    "dead_event",
    "finished_event",
    "hung_error",
    "out_of_attempts",
    "release_uses_attempt",
    "released_event",
    "retry_event",
]


def out_of_attempts(record: GenerationRecord, released: int) -> bool:
    """True when the attempt that just ended was the last one the job may use.

    ``released``: how often a worker gave the job back with a release that does not use up an attempt
    (``release_uses_attempt``). A retry, a lapsed lease or a release that uses one up then
    dead-letters the job instead of re-queuing it.
    """
    return record.attempt - released >= record.max_attempts


class ReleaseReason(StrEnum):
    """Release reasons the queue acts on. Others (none: a drain; a worker-local fault such as
    ``model_load``) are only written into the event."""

    hung = "hung"  # the job did not stop when its stopping worker interrupted it: released by force


def release_uses_attempt(reason: str | None) -> bool:
    """Whether a release for ``reason`` uses up the attempt it ends.

    A drain (the job stopped at a step and was given back) and a fault of the releasing worker are not
    the job's doing: free, counted in ``released``. A job that hung until its worker gave up on it may
    hang wherever it runs: that attempt is used up, so a job that always hangs ends after
    ``max_attempts`` (``hung_error``) instead of being re-delivered forever.
    """
    return reason == ReleaseReason.hung


def hung_error(attempt: int) -> ErrorInfo:
    """The failure of a job whose last attempt hung: ``worker_lost``, as when a hung job's lease lapses."""
    return ErrorInfo(
        code=ErrorCode.worker_lost, message=f"attempt {attempt} hung and was released by its stopping worker"
    )


class EventReason(StrEnum):
    """Fixed reasons of the events log. Reasons with details are built by the functions below."""

    enqueued = "enqueued"
    lease_expired = "lease_expired"  # running → queued: the worker stopped renewing
    released = "released"  # running → queued: a draining worker gave the job back
    canceled = "canceled"  # queued → canceled
    cancel_requested = "cancel_requested"  # the flag only: the status stays running
    canceled_lease_lapsed = "canceled: lease lapsed"  # running → canceled by the reaper


class DeadReason(StrEnum):
    """Fixed reasons of dead letters. An unreadable stream entry gets its parse error instead
    (``entries.UnreadableEntry.reason``)."""

    out_of_attempts = "out of attempts"  # a retry after the last attempt
    worker_lost = "worker_lost"  # the last attempt's lease lapsed
    invalid_record = "record is not a valid GenerationRecord"
    newer_record = "record written by a newer version, which no worker of it took in time"
    no_record = "no record for this job"


def claimed_by(worker_id: str) -> str:
    """``claimed by <worker>``: queued → running."""
    return f"claimed by {worker_id}"


def released_event(reason: str | None) -> str:
    """``released`` or ``released: <reason>``: running → queued, given back (``release_uses_attempt``
    says whether that used up the attempt).

    The reason says why a worker gave the job back (e.g. ``model_load``: its own model would not load),
    so a reader of the events can tell a drain from a fault of the releasing worker.
    """
    return EventReason.released.value + (f": {reason}" if reason else "")


def retry_event(code: ErrorCode) -> str:
    """``retry: <code>``: running → queued after a transient failure."""
    return f"retry: {code.value}"


def finished_event(status: Status, code: ErrorCode | None) -> str:
    """``<status>`` or ``<status>: <code>``: the worker ended the attempt."""
    return status.value + (f": {code.value}" if code else "")


def dead_event(code: ErrorCode, reason: DeadReason) -> str:
    """``failed: <code> (<dead reason>)``: out of attempts, the job fails and is dead-lettered."""
    return f"failed: {code.value} ({reason.value})"

"""How a record changes at each step of the lifecycle: pure functions both backends share.

Each returns a new ``GenerationRecord`` (never mutates) after ``check_transition`` accepted the
status change, and stamps ``updated_at``; ``started_at`` is set by the first claim only and
``finished_at`` by a terminal status. The backends add the atomic storage around them.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import ValidationError

from foundation.core.contract import ErrorInfo, GenerationRecord, Stage, Status, check_transition, utcnow
from foundation.core.errors import ErrorCode
from foundation.queue.base import Outcome
from foundation.queue.errors import UnreadableRecord

__all__ = [
    "UnreadableRecord",
    "canceled",
    "dead_lettered",
    "enqueued",
    "finished",
    "parse",
    "requeued",
    "started",
    "with_cancel_flag",
    "with_progress",
    "worker_lost",
]


def parse(raw: str) -> GenerationRecord:
    """A stored record; ``UnreadableRecord`` with the first problem when it does not validate."""
    try:
        return GenerationRecord.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise UnreadableRecord(raw, f"{where}: {first['msg']}"[:500]) from None


def _moved(record: GenerationRecord, status: Status, now: datetime, **changes: object) -> GenerationRecord:
    check_transition(record.status, status)
    update: dict[str, object] = {"status": status, "updated_at": now, **changes}
    if status in (Status.succeeded, Status.failed, Status.canceled):
        update["finished_at"] = now
    return record.model_copy(update=update)


def enqueued(record: GenerationRecord, *, max_attempts: int, now: datetime | None = None) -> GenerationRecord:
    """The record as first stored: ``queued``, no attempt yet, the queue's attempt limit."""
    if record.status is not Status.queued:
        raise ValueError(f"a new job must be queued, not {record.status.value}")
    now = now or utcnow()
    return record.model_copy(
        update={"attempt": 0, "max_attempts": max_attempts, "updated_at": now, "stage": Stage.queued, "progress": 0.0}
    )


def started(record: GenerationRecord, now: datetime | None = None) -> GenerationRecord:
    """Claimed: ``running`` with the next attempt number (the fencing token)."""
    now = now or utcnow()
    return _moved(
        record,
        Status.running,
        now,
        attempt=record.attempt + 1,
        started_at=record.started_at or now,
        stage=Stage.queued,
        progress=0.0,
    )


def requeued(
    record: GenerationRecord, *, error: ErrorInfo | None = None, now: datetime | None = None
) -> GenerationRecord:
    """Back to ``queued`` for re-delivery (lapsed lease, retry, release); a retry keeps its error."""
    now = now or utcnow()
    return _moved(record, Status.queued, now, stage=Stage.queued, progress=0.0, error=error or record.error)


def dead_lettered(record: GenerationRecord, error: ErrorInfo, now: datetime | None = None) -> GenerationRecord:
    """Out of attempts: ``failed`` with the error that used up the last one."""
    return _moved(record, Status.failed, now or utcnow(), error=error)


def worker_lost(attempt: int) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.worker_lost, message=f"lease lapsed on attempt {attempt}: the worker stopped")


def finished(record: GenerationRecord, outcome: Outcome, now: datetime | None = None) -> GenerationRecord:
    """The worker's reported end of the current attempt."""
    now = now or utcnow()
    changes: dict[str, object] = {
        "artifacts": outcome.artifacts,
        "usage": outcome.usage or record.usage,
        "price": outcome.price or record.price,
        "actual_prompt": outcome.actual_prompt or record.actual_prompt,
        "prompt_extension": outcome.prompt_extension or record.prompt_extension,
        "prompt_tokens": outcome.prompt_tokens or record.prompt_tokens,
        "resumed_from_step": outcome.resumed_from_step,
        "error": outcome.error,
    }
    if outcome.status is Status.succeeded:
        changes.update(stage=Stage.done, progress=1.0, error=None)
    elif outcome.status is Status.canceled:  # over: the progress made stays, the stage says it ended
        changes.update(stage=Stage.done)
    return _moved(record, outcome.status, now, **changes)


def canceled(record: GenerationRecord, now: datetime | None = None) -> GenerationRecord:
    """A queued job canceled before any worker took it: its stage is ``done`` (never ``queued``)."""
    return _moved(record, Status.canceled, now or utcnow(), cancel_requested=True, stage=Stage.done)


def with_cancel_flag(record: GenerationRecord, now: datetime | None = None) -> GenerationRecord:
    """A running job asked to stop: the worker sees the flag at its next step."""
    return record.model_copy(update={"cancel_requested": True, "updated_at": now or utcnow()})


def with_progress(
    record: GenerationRecord, stage: Stage, progress: float, now: datetime | None = None
) -> GenerationRecord:
    return record.model_copy(
        update={"stage": stage, "progress": min(1.0, max(0.0, progress)), "updated_at": now or utcnow()}
    )

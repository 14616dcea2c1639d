"""How a record changes at each step of the lifecycle: pure functions both backends share.

Each returns a new ``GenerationRecord`` (never mutates) after ``check_transition`` accepted the
status change, and stamps ``updated_at``; ``started_at`` is set by the first claim only and
``finished_at`` by a terminal status. The backends add the atomic storage around them.

Every record is stored with the record format of the version that wrote it (``RECORD_FORMAT``; the job
hash's ``format``, ``jobs.record_format``). A version reads the formats up to its own; a record in a newer
one is ``NewerRecord`` whatever its text, left to newer workers, and if none takes it in time ended with
``failed_unread`` without ever being parsed.

The API's reads go through ``read``: a record that ended unread reads as it ended whatever its format, and one
in a format this version reads that does not validate reads ``failed: record_unreadable`` with what of it still
validates (``salvaged``). A worker that meets such a record sets it aside: ended ``failed`` in a text every
version reads when anything of it validates (``set_aside``), its stored text in the dead letter.
"""

from __future__ import annotations

import json
from datetime import datetime

from pydantic import TypeAdapter, ValidationError

from foundation.core.contract import ErrorInfo, GenerationRecord, Stage, Status, check_transition, utcnow
from foundation.core.errors import ErrorCode, public_message
from foundation.queue.base import Outcome
from foundation.queue.errors import NewerRecord, UnreadableRecord

__all__ = [
    "RECORD_FORMAT",
    "NewerRecord",
    "UnreadableRecord",
    "canceled",
    "dead_lettered",
    "enqueued",
    "failed_unread",
    "finished",
    "last_written",
    "parse",
    "read",
    "record_format",
    "requeued",
    "salvaged",
    "set_aside",
    "started",
    "with_cancel_flag",
    "with_progress",
    "worker_lost",
]


# The record layout this version writes and reads. Bump it with any change that an older version would
# misread: a status, stage or error code it does not know, a field whose meaning changes, a field it would
# drop when it rewrites the record. Workers of the older version then leave such records to the newer ones
# (docs/queue-protocol.md, "Rolling upgrades") instead of failing them, running them wrongly or losing data.
RECORD_FORMAT = 1

_TIME = TypeAdapter(datetime)


def record_format(stored: object) -> int:
    """The format stored beside a record; 1 when absent (records from before formats were stored) or not
    a whole number."""
    try:
        return int(str(stored)) if stored not in (None, "") else 1
    except ValueError:
        return 1


def parse(raw: str, stored_format: int = 1, *, readable: int = RECORD_FORMAT) -> GenerationRecord:
    """A stored record; ``NewerRecord`` when its format is above ``readable`` (this version's: whatever
    the text, a newer version's record is not ours to run), ``UnreadableRecord`` with the first problem
    when it does not validate."""
    if stored_format > readable:
        raise NewerRecord(raw, stored_format, readable)
    try:
        return GenerationRecord.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise UnreadableRecord(raw, f"{where}: {first['msg']}"[:500]) from None


def read(
    raw: str, stored_format: int = 1, *, project: str | None = None, readable: int = RECORD_FORMAT
) -> GenerationRecord:
    """A stored record as a client is shown it (a GET, a list). ``parse``, except:

    - a newer version's record that ended unread (``failed_unread``: ``failed``, ``version_unavailable``) reads
      as it ended: it was ended so that every version reads how (any other newer record: ``NewerRecord``);
    - a record in a format this version reads that does not validate reads as ``salvaged``: ``failed`` with
      ``record_unreadable``; ``UnreadableRecord`` only when nothing of it validates (text that is no record).

    Both exceptions carry ``project``, the one the store keeps beside the record, for the caller's check of
    whose it is."""
    if stored_format > readable:
        ended = _ended_unread(raw)
        if ended is None:
            raise NewerRecord(raw, stored_format, readable, project=project)
        return ended
    try:
        return parse(raw, stored_format, readable=readable)
    except UnreadableRecord as e:
        record = salvaged(raw)
        if record is None:
            raise UnreadableRecord(raw, e.detail, project=project) from None
        return record


def _ended_unread(raw: str) -> GenerationRecord | None:
    try:
        record = GenerationRecord.model_validate_json(raw)
    except ValidationError:
        return None
    code = record.error.code if record.error is not None else None
    return record if record.status is Status.failed and code is ErrorCode.version_unavailable else None


def salvaged(raw: str, now: datetime | None = None) -> GenerationRecord | None:
    """A record text that does not validate, as a ``failed`` record with ``record_unreadable``: its status,
    stage and error replaced (``now``: its end stamped too), the rest kept when it then validates; None when
    it still does not (text that is no JSON object, a field such as the parameters broken)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    error = ErrorInfo(code=ErrorCode.record_unreadable, message=public_message(ErrorCode.record_unreadable))
    data.update(status=Status.failed.value, stage=Stage.done.value, error=error.model_dump(mode="json"))
    if now is not None:
        at = _TIME.dump_python(now, mode="json")
        data.update(finished_at=at, updated_at=at)
    try:
        return GenerationRecord.model_validate(data)
    except ValidationError:
        return None


def set_aside(raw: str, now: datetime | None = None) -> str:
    """The text a set-aside record (one of this version's formats that does not validate) is ended with:
    ``salvaged`` (``failed: record_unreadable``, which every version reads), or the stored text as it is
    when nothing of it validates (the status stored beside it says ``failed``; ``read`` raises for it)."""
    record = salvaged(raw, now or utcnow())
    return raw if record is None else record.model_dump_json()


def _moved(record: GenerationRecord, status: Status, now: datetime, **changes: object) -> GenerationRecord:
    check_transition(record.status, status)
    update: dict[str, object] = {"status": status, "updated_at": now, **changes}
    if status in (Status.succeeded, Status.failed, Status.canceled):
        update["finished_at"] = now
    return record.model_copy(update=update)


def enqueued(
    record: GenerationRecord,
    *,
    max_attempts: int,
    idempotency_key: str | None = None,
    now: datetime | None = None,
) -> GenerationRecord:
    """The record as first stored: ``queued``, no attempt yet, the queue's attempt limit, and the idempotency
    key it is created under (``ApiQueue.delete`` frees that key with the job)."""
    if record.status is not Status.queued:
        raise ValueError(f"a new job must be queued, not {record.status.value}")
    now = now or utcnow()
    update = {"attempt": 0, "max_attempts": max_attempts, "updated_at": now, "stage": Stage.queued, "progress": 0.0}
    return record.model_copy(update={**update, "idempotency_key": idempotency_key})


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


def failed_unread(raw: str, now: datetime | None = None) -> str:
    """A newer version's record that no worker of that version took in time, ended ``failed`` with
    ``version_unavailable`` in its own text: status, stage, error and times replaced, the rest kept as it
    was written, so the newer version reads it whole and this one reads at least how it ended. Text that
    is no JSON object is kept as it is (the stored status and the dead letter say it failed)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(data, dict):
        return raw
    at = _TIME.dump_python(now or utcnow(), mode="json")
    error = ErrorInfo(code=ErrorCode.version_unavailable, message=public_message(ErrorCode.version_unavailable))
    data.update(status=Status.failed.value, stage=Stage.done.value, error=error.model_dump(mode="json"))
    data.update(finished_at=at, updated_at=at)
    return json.dumps(data, separators=(",", ":"))


def last_written(raw: str) -> datetime | None:
    """When an unread record was last written (its ``updated_at``, else ``created_at``), by its own text;
    None when the text does not say."""
    try:
        data = json.loads(raw)
        value = data.get("updated_at") or data.get("created_at")
        return _TIME.validate_python(value) if value else None
    except (ValueError, AttributeError, ValidationError):
        return None

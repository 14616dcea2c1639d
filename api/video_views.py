"""What the Videos API (``/v1/videos``) shows of a generation record, in the shapes the openai SDK reads.

A video is a generation seen through that API: the same record, the same id. The translation, field by
field (the SDK's ``Video`` model, ``openai.types.Video``):

================  ==========================================================================================
field             from the record
================  ==========================================================================================
``status``        ``queued`` → ``queued``, ``running`` → ``in_progress``, ``succeeded`` → ``completed``,
                  ``failed`` → ``failed``; ``canceled`` → ``failed`` with ``error.code`` ``canceled`` (the SDK
                  knows no canceled status, and its ``poll`` stops only at completed or failed)
``progress``      an integer 0-100 over the whole job: each worker stage has its span (``_STAGE_SPAN``,
                  denoising the widest), the record's progress 0..1 moves within it; 100 once completed
``seconds``       ``duration_seconds`` as a string (the SDK types it so: ``"4"``)
``size``          the exact output size, ``"WxH"`` (``144p`` ``16:9`` is ``256x144``)
``created_at``,   unix seconds of ``created_at`` and ``finished_at`` (completed or failed)
``completed_at``
``expires_at``    completed: when the record and its files expire (``finished_at`` + ``queue.record_ttl_days``)
``error``         ``{code, message}``: the failure's code and its fixed public sentence
================  ==========================================================================================

Errors on these routes have the OpenAI shape, ``{"error": {"message", "type", "param", "code"}}``: the
service's own error body (``code``, ``message``, ``param``) with ``type`` added (``openai_error``), so the
SDK raises its typed exceptions (``BadRequestError``, ``AuthenticationError``, ``NotFoundError``,
``RateLimitError``...) and a client of the service's own shape reads it too.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field
from starlette.responses import JSONResponse

from foundation.core.contract import GenerationRecord, Stage, Status
from foundation.core.errors import ErrorCode, public_message
from foundation.core.sizes import SIZE_TABLE

__all__ = [
    "STAGE_SPAN",
    "Video",
    "VideoDeleted",
    "VideoError",
    "VideoList",
    "openai_error",
    "video_progress",
    "video_view",
]

VideoStatus = Literal["queued", "in_progress", "completed", "failed"]

_STATUS: dict[Status, VideoStatus] = {
    Status.queued: "queued",
    Status.running: "in_progress",
    Status.succeeded: "completed",
    Status.failed: "failed",
    Status.canceled: "failed",
}

# The span of the whole job's 0-100 that each stage covers; the record's progress (0..1 within its stage)
# moves inside it. Denoising is most of a job's time on a GPU; 100 is kept for completed.
STAGE_SPAN: dict[Stage, tuple[int, int]] = {
    Stage.queued: (0, 0),
    Stage.loading: (0, 5),
    Stage.extending_prompt: (5, 10),
    Stage.denoising: (10, 85),
    Stage.decoding: (85, 90),
    Stage.encoding: (90, 95),
    Stage.uploading: (95, 99),
    Stage.done: (99, 99),
}

# The OpenAI error ``type`` of each status; every other 4xx is an ``invalid_request_error``.
_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


class VideoError(BaseModel):
    code: ErrorCode
    message: str


class Video(BaseModel):
    """The openai SDK's ``Video``."""

    id: str
    object: Literal["video"] = "video"
    model: str
    status: VideoStatus
    progress: int = Field(ge=0, le=100)
    created_at: int
    completed_at: int | None = None
    expires_at: int | None = None
    seconds: str
    size: str
    prompt: str
    remixed_from_video_id: str | None = None
    error: VideoError | None = None


class VideoList(BaseModel):
    """The SDK's cursor page: pass ``last_id`` as ``after`` for the next page while ``has_more``."""

    object: Literal["list"] = "list"
    data: list[Video]
    first_id: str | None
    last_id: str | None
    has_more: bool
    # Not in OpenAI's page: videos of this page's stretch this version cannot read, left out (docs/client.md).
    skipped: int = 0


class VideoDeleted(BaseModel):
    id: str
    object: Literal["video.deleted"] = "video.deleted"
    deleted: bool = True


def _unix(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def _size(record: GenerationRecord) -> str:
    """``"WxH"`` of the record's resolution and ratio (resolved at create, so always set on a record)."""
    size = SIZE_TABLE.get(record.parameters.resolution or "", {}).get(record.parameters.ratio or "")
    return "" if size is None else f"{size[0]}x{size[1]}"


def video_progress(record: GenerationRecord) -> int:
    """The job's progress as a whole, 0-100 (100 only once it succeeded)."""
    if record.status is Status.succeeded:
        return 100
    start, end = STAGE_SPAN.get(record.stage, (0, 99))
    return min(99, start + int((end - start) * record.progress))


def _error(record: GenerationRecord) -> VideoError | None:
    if record.status is Status.canceled:
        return VideoError(code=ErrorCode.canceled, message=public_message(ErrorCode.canceled))
    if record.status is Status.failed:
        code = record.error.code if record.error is not None else ErrorCode.internal_error
        return VideoError(code=code, message=public_message(code))
    return None


def video_view(record: GenerationRecord, *, record_ttl_s: float) -> Video:
    """``record`` as a ``Video``; ``record_ttl_s`` is the queue's retention (``expires_at``)."""
    finished = record.finished_at if record.status in (Status.succeeded, Status.failed, Status.canceled) else None
    expires = finished + timedelta(seconds=record_ttl_s) if finished and record.status is Status.succeeded else None
    return Video(
        id=record.id,
        model=record.model,
        status=_STATUS[record.status],
        progress=video_progress(record),
        created_at=int(record.created_at.timestamp()),
        completed_at=_unix(finished),
        expires_at=_unix(expires),
        seconds=str(record.parameters.duration_seconds),
        size=_size(record),
        prompt=record.input.prompt,
        error=_error(record),
    )


def openai_error(response: JSONResponse) -> JSONResponse:
    """The service's error answer (``{"error": {"code", "message", "param"}}``) in the OpenAI shape: ``type``
    added, the headers kept. A 409 also says ``x-should-retry: false``: the SDK retries a 409 (a lock
    timeout on OpenAI's side), and none of ours goes away by repeating the request."""
    body = json.loads(bytes(response.body))
    status = response.status_code
    body["error"]["type"] = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
    if status == 409:
        headers["x-should-retry"] = "false"
    return JSONResponse(body, status_code=status, headers=headers)

"""A generation record as the Videos API shows it (``api/video_views.py``): every field of the SDK's own
``Video`` model is there, statuses and progress translate as documented, errors get the OpenAI shape. (The
SDK reads answers without validating them against its literals, such as its four sizes: the e2e tests drive
the SDK itself, tests/e2e/test_openai_videos.py.)"""

from __future__ import annotations

import json
from datetime import timedelta

import openai.types
import pytest
from starlette.responses import JSONResponse

from api.video_views import STAGE_SPAN, openai_error, video_progress, video_view
from foundation.core.contract import (
    ErrorInfo,
    GenerationRecord,
    Money,
    RecordInput,
    RecordParameters,
    Stage,
    Status,
    utcnow,
)
from foundation.core.errors import ErrorCode

TTL_S = 30 * 86400


def record(
    status: Status = Status.queued, stage: Stage = Stage.queued, progress: float = 0.0, **more: object
) -> GenerationRecord:
    now = utcnow()
    ended = status in (Status.succeeded, Status.failed, Status.canceled)
    return GenerationRecord(
        id="gen_1",
        model="tiny-wan",
        mode="text_to_video",
        variant="standard",
        status=status,
        stage=stage,
        progress=progress,
        parameters=RecordParameters(resolution="240p", ratio="9:16", duration_seconds=3),
        input=RecordInput(prompt="a red fox"),
        price_hold=Money(amount="0.06"),
        created_at=now - timedelta(seconds=30),
        finished_at=now if ended else None,
        **more,
    )


def sdk(view: object) -> openai.types.Video:
    """The view's JSON as the openai SDK reads an answer (every field of its model present, none validated)."""
    data = json.loads(view.model_dump_json())  # type: ignore[attr-defined]
    assert set(openai.types.Video.model_fields) <= set(data)
    return openai.types.Video.construct(**data)


def test_a_queued_record_is_a_queued_video_with_the_sdks_types() -> None:
    video = sdk(video_view(record(), record_ttl_s=TTL_S))
    assert (video.id, video.object, video.model, video.status, video.progress) == (
        "gen_1",
        "video",
        "tiny-wan",
        "queued",
        0,
    )
    assert (video.seconds, video.size, video.prompt) == ("3", "240x432", "a red fox")
    assert video.completed_at is None and video.expires_at is None and video.error is None


def test_a_succeeded_record_is_completed_and_expires_with_its_record() -> None:
    done = record(Status.succeeded, Stage.done, 1.0)
    video = sdk(video_view(done, record_ttl_s=TTL_S))
    assert (video.status, video.progress) == ("completed", 100)
    assert done.finished_at is not None
    assert video.completed_at == int(done.finished_at.timestamp()) >= video.created_at
    assert video.expires_at == int((done.finished_at + timedelta(seconds=TTL_S)).timestamp())


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [
        (
            Status.failed,
            ErrorInfo(code=ErrorCode.out_of_memory, message="CUDA out of memory at /srv/x.py"),
            "out_of_memory",
        ),
        (Status.canceled, None, "canceled"),
    ],
)
def test_failed_and_canceled_read_failed_with_a_code_and_the_public_sentence(
    status: Status, error: ErrorInfo | None, code: str
) -> None:
    video = sdk(video_view(record(status, Stage.denoising, 0.5, error=error), record_ttl_s=TTL_S))
    assert video.status == "failed" and video.error is not None and video.error.code == code
    assert "/srv" not in video.error.message and video.expires_at is None and video.completed_at is not None


def test_progress_climbs_through_the_stages_and_reaches_100_only_when_completed() -> None:
    assert set(STAGE_SPAN) == set(Stage)  # a new stage needs its span
    seen = [
        video_progress(record(Status.running, stage, fraction))
        for stage in Stage
        if stage is not Stage.queued
        for fraction in (0.0, 0.5, 1.0)
    ]
    assert seen == sorted(seen) and max(seen) == 99
    assert video_progress(record(Status.running, Stage.denoising, 0.5)) == 47
    assert video_progress(record(Status.succeeded, Stage.done, 1.0)) == 100


def test_errors_get_the_openai_type_and_a_409_is_not_retried() -> None:
    ours = JSONResponse(
        {"error": {"code": "not_deletable", "message": "not yet", "param": "video_id"}},
        409,
        headers={"X-Request-Id": "r"},
    )
    answered = openai_error(ours)
    assert json.loads(bytes(answered.body)) == {
        "error": {"code": "not_deletable", "message": "not yet", "param": "video_id", "type": "invalid_request_error"}
    }
    assert answered.headers["x-should-retry"] == "false" and answered.headers["x-request-id"] == "r"
    for status, kind in (
        (401, "authentication_error"),
        (403, "permission_error"),
        (429, "rate_limit_error"),
        (503, "server_error"),
    ):
        body = json.loads(
            bytes(openai_error(JSONResponse({"error": {"code": "x", "message": "m", "param": None}}, status)).body)
        )
        assert body["error"]["type"] == kind

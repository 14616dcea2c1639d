"""The job contract: the create request, the generation record, statuses and their transitions.

Requests are strict (unknown fields rejected, no type coercion: ``"5"`` is not an integer) because they
come from clients. Records are lenient on read (unknown fields ignored) so an older reader survives a
newer writer. The queue is the only writer of ``status``; it calls ``check_transition`` first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from foundation.core.errors import ErrorCode, IllegalTransition, RequestRejected

__all__ = [
    "AUTO_RATIO",
    "TERMINAL",
    "Artifact",
    "AudioInfo",
    "CreateRequest",
    "ErrorInfo",
    "GenerationRecord",
    "IllegalTransition",
    "InputSpec",
    "Money",
    "Parameters",
    "PromptExtension",
    "PromptTokens",
    "RecordInput",
    "RecordParameters",
    "Stage",
    "Status",
    "StoredImage",
    "Usage",
    "WebhookEvent",
    "check_transition",
    "parse_create_request",
    "rejection",
    "utcnow",
]

MAX_SEED = 2**32 - 1


class Status(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    canceled = "canceled"


TERMINAL: frozenset[Status] = frozenset({Status.succeeded, Status.failed, Status.canceled})

# running -> queued happens only when a lease lapses and the job is re-delivered.
# queued -> failed happens when a job is dead-lettered without running (attempts exhausted).
_ALLOWED: dict[Status, frozenset[Status]] = {
    Status.queued: frozenset({Status.running, Status.canceled, Status.failed}),
    Status.running: frozenset({Status.succeeded, Status.failed, Status.canceled, Status.queued}),
    Status.succeeded: frozenset(),
    Status.failed: frozenset(),
    Status.canceled: frozenset(),
}


def check_transition(current: Status, new: Status) -> None:
    """Raise ``IllegalTransition`` unless ``current -> new`` is an allowed lifecycle step."""
    if new not in _ALLOWED[current]:
        raise IllegalTransition(current, new)


class Stage(StrEnum):
    """Where a job is inside a worker; progress (0..1) is reported within a stage."""

    queued = "queued"
    loading = "loading"
    extending_prompt = "extending_prompt"
    denoising = "denoising"
    decoding = "decoding"
    encoding = "encoding"
    uploading = "uploading"
    done = "done"


def utcnow() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------------------------------------------
# Create request (strict)

_Strict = ConfigDict(extra="forbid", strict=True)
ResolutionLabel = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{1,4}p$")]
RatioLabel = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]?:[1-9][0-9]?$")]
# ``ratio: "auto"`` on a request with an input image: the model's offered ratio nearest the image's aspect.
# Records store the ratio it resolved to, never "auto".
AUTO_RATIO = "auto"
RatioChoice = Annotated[str, StringConstraints(pattern=r"^(?:auto|[1-9][0-9]?:[1-9][0-9]?)$")]


class Parameters(BaseModel):
    """Generation parameters. Omitted ones take the model's catalog defaults at resolution time."""

    model_config = _Strict

    resolution: ResolutionLabel | None = None
    duration_seconds: Annotated[int, Field(ge=1, le=3600)] | None = None
    ratio: RatioChoice | None = None
    audio: bool | None = None
    prompt_extend: bool | None = None
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = None
    negative_prompt: Annotated[str, Field(max_length=10_000)] | None = None
    # Live previews on the event stream while denoising (``event: preview``); false: none for this job.
    # Omitted: the worker's setting (on by default).
    preview: bool | None = None


class _PromptInput(BaseModel):
    """The prompt, common to requests and records."""

    model_config = _Strict

    # The catalog sets each model's real limit; this bound only keeps absurd bodies out early.
    prompt: Annotated[str, Field(min_length=1, max_length=100_000)]

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("prompt must contain non-whitespace text")
        if "\x00" in v:
            raise ValueError("prompt must not contain NUL characters")
        return v


# Input image sources. Their content is checked by the API at create with the image's own codes
# (``invalid_image``, ``image_url_not_allowed``, ...), so only absurd lengths are refused here; a data URI
# is bounded in practice by ``api.max_body_bytes``.
ImageUrl = Annotated[str, StringConstraints(min_length=1, max_length=2048)]
ImageDataUri = Annotated[str, StringConstraints(min_length=1, max_length=200_000_000)]


class InputSpec(_PromptInput):
    """``input`` of a create request: the prompt, and for modes that take an image (``image_to_video``)
    exactly one of ``image_url`` or ``image`` (catalog ``MODE_INPUTS`` says which mode takes what)."""

    image_url: ImageUrl | None = None  # https://... (http only to hosts in api.inputs.allow_http_hosts)
    image: ImageDataUri | None = None  # data:image/jpeg|png|webp;base64,...


_Id = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class WebhookEvent(StrEnum):
    """The webhook event types: what a registered endpoint subscribes to and a create's ``webhook_events``
    chooses (``api/webhooks``)."""

    generation_running = "generation.running"
    generation_succeeded = "generation.succeeded"
    generation_failed = "generation.failed"
    generation_canceled = "generation.canceled"


# The outbound rules (https, public addresses) are the API's to check at create; only the length is bounded here.
WebhookUrl = Annotated[str, StringConstraints(min_length=1, max_length=2048)]
# Lax on the items alone: a strict enum takes only its own instances, and a JSON body brings strings.
WebhookEvents = Annotated[list[Annotated[WebhookEvent, Field(strict=False)]], Field(min_length=1, max_length=8)]


class CreateRequest(BaseModel):
    """``POST /v1/generations`` body."""

    model_config = _Strict

    model: _Id
    mode: _Id
    variant: _Id
    parameters: Parameters
    input: InputSpec
    # A per-request webhook: the events of this generation POSTed, signed, to this URL (docs/client.md).
    webhook_url: WebhookUrl | None = None
    webhook_events: WebhookEvents | None = None  # None: every event type

    @field_validator("webhook_events")
    @classmethod
    def _events_as_a_set(cls, v: list[WebhookEvent] | None, info: ValidationInfo) -> list[WebhookEvent] | None:
        if v is not None and info.data.get("webhook_url") is None:
            raise ValueError("webhook_events needs a webhook_url")
        # Sorted and once each: one choice of events has one spelling, and so one idempotency hash.
        return None if v is None else sorted(set(v))


# ---------------------------------------------------------------------------------------------------
# Generation record (lenient on read)

_Lenient = ConfigDict(extra="ignore")


class Money(BaseModel):
    """A USD amount as a decimal string (computed with ``Decimal``, never floats)."""

    model_config = _Lenient

    currency: Literal["USD"] = "USD"
    amount: Annotated[str, StringConstraints(pattern=r"^[0-9]+\.[0-9]{2,6}$")]


class Usage(BaseModel):
    model_config = _Lenient

    output_seconds: float
    gpu_seconds: float


class AudioInfo(BaseModel):
    model_config = _Lenient

    codec: str
    sample_rate: int
    channels: int


class Artifact(BaseModel):
    """Stored metadata of one uploaded object. Never a URL: the API signs one on every read."""

    model_config = _Lenient

    kind: Literal["video", "poster"]
    key: str
    content_type: str
    bytes: int
    sha256: str
    width: int
    height: int
    fps: float | None = None
    frames: int | None = None
    duration_seconds: float | None = None
    audio: AudioInfo | None = None


class ErrorInfo(BaseModel):
    model_config = _Lenient

    code: ErrorCode
    message: str


class PromptExtension(BaseModel):
    """What happened to ``prompt_extend``: ``applied``, or ``fallback`` with the reason."""

    model_config = _Lenient

    status: Literal["applied", "fallback"]
    reason: str | None = None


class PromptTokens(BaseModel):
    """The prompt as the text encoder saw it: ``total`` tokens, of which the first ``kept`` fit its ``limit``
    (UMT5: 512 on Wan, Gemma-3: 1024 on LTX-2). ``truncated`` is true when the encoder dropped the rest."""

    model_config = _Lenient

    total: int
    kept: int
    limit: int
    truncated: bool


class RecordParameters(Parameters):
    """``Parameters`` as stored on a record: lenient, so a newer writer's fields do not break a reader."""

    model_config = ConfigDict(extra="ignore", strict=False)


class StoredImage(BaseModel):
    """An input image the API fetched and checked at create, stored in the artifact store under the generation's
    prefix. Workers read only this copy (GPU nodes need no internet; retries and resumes never refetch) and
    check its sha256 before use."""

    model_config = _Lenient

    key: str
    content_type: str  # sniffed from the bytes: image/jpeg, image/png or image/webp
    bytes: int
    sha256: str
    width: int  # after EXIF orientation
    height: int


class RecordInput(_PromptInput):
    model_config = ConfigDict(extra="ignore", strict=False)

    # Set for modes that take an image (``image_to_video``); the request's URL or data URI is not kept.
    image: StoredImage | None = None


class GenerationRecord(BaseModel):
    model_config = _Lenient

    id: str
    object: Literal["generation"] = "generation"
    project: str = "default"
    status: Status = Status.queued
    stage: Stage = Stage.queued
    progress: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    model: str
    mode: str
    variant: str
    parameters: RecordParameters
    input: RecordInput
    actual_prompt: str | None = None
    prompt_extension: PromptExtension | None = None
    prompt_tokens: PromptTokens | None = None  # the used prompt against the text encoder's token limit
    # The finished attempt continued a denoising checkpoint taken after this step (None: it ran from step 0).
    resumed_from_step: Annotated[int, Field(ge=1)] | None = None
    price_hold: Money
    price: Money | None = None
    usage: Usage | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    error: ErrorInfo | None = None
    # The Idempotency-Key that made it (stamped by the queue at enqueue; never in a public view): deleting the
    # job frees that key, so a create repeated with it makes a new job rather than finding a deleted one.
    # Declared before `attempt`: claim.lua rewrites the record's tail (attempt on) by pattern, so no field
    # may be added from `attempt` on without changing that script (tests/integration/test_claim_start.py).
    idempotency_key: str | None = None
    attempt: int = 0
    max_attempts: int = 3
    cancel_requested: bool = False
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


# ---------------------------------------------------------------------------------------------------
# Parsing with coded errors


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc)


# The objects of a create body by where they sit, so an unknown field is answered with the ones it may be.
_OBJECTS: dict[tuple[int | str, ...], type[BaseModel]] = {
    (): CreateRequest,
    ("parameters",): Parameters,
    ("input",): InputSpec,
}


def _unknown_field(loc: tuple[int | str, ...]) -> str:
    message = f"unknown field {_loc(loc)!r}"
    owner = _OBJECTS.get(loc[:-1])
    if owner is None:
        return message
    where = _loc(loc[:-1]) or "the request"
    return f"{message}; {where} takes: {', '.join(owner.model_fields)}"


def rejection(error: ValidationError) -> RequestRejected:
    """A create body's validation errors as one coded refusal: every missing field at once (a client
    fixes them in one round trip), else the first error, with the field path as ``param``."""
    errors = error.errors(include_url=False)
    missing = [_loc(e["loc"]) for e in errors if e["type"] == "missing"]
    if len(missing) == 1:
        return RequestRejected(ErrorCode.invalid_parameter, f"field {missing[0]!r} is required", missing[0])
    if missing:
        return RequestRejected(ErrorCode.invalid_parameter, f"fields {', '.join(missing)} are required", missing[0])
    first = errors[0]
    param = _loc(first["loc"]) or None
    unknown = first["type"] == "extra_forbidden"
    message = _unknown_field(first["loc"]) if unknown else f"{param}: {first['msg']}"
    return RequestRejected(ErrorCode.invalid_parameter, message, param)


def parse_create_request(data: object) -> CreateRequest:
    """Validate a decoded JSON body; raise ``RequestRejected`` with a stable code and the field path.
    The API reads bodies with the catalog's defaults and sentences (``foundation.core.intake``)."""
    if not isinstance(data, dict):
        raise RequestRejected(ErrorCode.invalid_request, "request body must be a JSON object", None)
    try:
        return CreateRequest.model_validate(data)
    except ValidationError as e:
        raise rejection(e) from None

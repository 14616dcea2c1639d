"""Public views: what clients see of records and of the catalog (documented in the OpenAPI schema).

Records keep object keys; views carry freshly signed URLs instead. Catalog views carry capabilities
and rates; never weights, hub ids, adapters or endpoints. A failed generation's ``error.message`` is
always the code's fixed public sentence (``foundation.core.errors.PUBLIC_MESSAGES``), whatever the
record holds: workers store only that sentence, and records written by older workers, whose messages
could carry store endpoints, paths, class names or ffmpeg's stderr, are cleaned on the way out.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from foundation.core.catalog import ModelSpec, mode_inputs
from foundation.core.contract import (
    Artifact,
    AudioInfo,
    ErrorInfo,
    GenerationRecord,
    Money,
    PromptExtension,
    PromptTokens,
    RecordInput,
    RecordParameters,
    Stage,
    Status,
    Usage,
)
from foundation.core.errors import public_message
from foundation.stores.base import ArtifactStore

if TYPE_CHECKING:
    from foundation.settings import ApiSettings

__all__ = [
    "ArtifactView",
    "GenerationList",
    "GenerationView",
    "ModeView",
    "ModelList",
    "ModelView",
    "RatesView",
    "artifact_view",
    "generation_view",
    "model_view",
    "public_error",
    "retry_after_s",
    "view_json",
]


class ArtifactView(BaseModel):
    kind: Literal["video", "poster"]
    content_type: str
    bytes: int
    sha256: str
    width: int
    height: int
    fps: float | None = None
    frames: int | None = None
    duration_seconds: float | None = None
    audio: AudioInfo | None = None
    download_url: str = Field(description="Short-lived signed URL, newly signed on every GET of the generation.")
    expires_at: datetime = Field(description="When download_url stops working.")


class GenerationView(BaseModel):
    id: str
    object: Literal["generation"] = "generation"
    status: Status
    stage: Stage
    progress: float = Field(ge=0.0, le=1.0)
    queue_position: int | None = Field(default=None, description="0-based place in the model's queue while queued.")
    model: str
    mode: str
    variant: str
    parameters: RecordParameters = Field(description="As resolved at create: defaults and the seed filled in.")
    input: RecordInput
    actual_prompt: str | None = None
    prompt_extension: PromptExtension | None = None
    prompt_tokens: PromptTokens | None = Field(
        default=None,
        description="The used prompt against the text encoder's token limit; truncated: the rest was not seen.",
    )
    resumed_from_step: int | None = Field(
        default=None,
        description=(
            "The attempt that finished continued a denoising checkpoint taken after this step (its worker was "
            "stopped or lost mid-job); null when it denoised from the first step."
        ),
    )
    price_hold: Money = Field(description="USD hold taken at create; the final price never exceeds it.")
    price: Money | None = None
    usage: Usage | None = None
    artifacts: list[ArtifactView] = Field(default_factory=list)
    error: ErrorInfo | None = None
    attempt: int
    max_attempts: int
    cancel_requested: bool = False
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None


class GenerationList(BaseModel):
    object: Literal["list"] = "list"
    data: list[GenerationView]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")
    skipped: int = Field(
        default=0,
        description=(
            "Generations of this page's stretch of the listing left out because this version of the service "
            "cannot read their records: written by a newer version during an upgrade (a later request may list "
            "them), or unreadable (a GET answers 410 record_unreadable). A page may then hold fewer than limit."
        ),
    )


# Fields a view copies from its record as they are (artifacts are re-signed, the position is live).
_FROM_RECORD = tuple(
    name
    for name in GenerationView.model_fields
    if name in GenerationRecord.model_fields and name not in {"artifacts", "queue_position", "object"}
)


# Fields an artifact view copies from its stored artifact (all but the object key).
_FROM_ARTIFACT = tuple(name for name in ArtifactView.model_fields if name in Artifact.model_fields)


# Views are built with ``model_construct``: every value comes from a record that was validated when it
# was read (nested models kept as the instances they are) or from our own signing, so validating it
# again would only spend the poll's time. The JSON is rendered once, by ``view_json``.
def artifact_view(artifact: Artifact, store: ArtifactStore) -> ArtifactView:
    signed = store.sign_url(artifact.key)
    fields = {name: getattr(artifact, name) for name in _FROM_ARTIFACT}
    return ArtifactView.model_construct(**fields, download_url=signed.url, expires_at=signed.expires_at)


def generation_view(record: GenerationRecord, store: ArtifactStore, *, queue_position: int | None) -> GenerationView:
    # Only a succeeded generation offers downloads; a failed attempt's partial objects stay private.
    artifacts = [artifact_view(a, store) for a in record.artifacts] if record.status is Status.succeeded else []
    # The record's own field values (nested models included) pass straight in: pydantic keeps model
    # instances as they are, where a model_dump round trip would rebuild every nested model (this is
    # the hot path of every poll).
    fields = {name: getattr(record, name) for name in _FROM_RECORD}
    fields["error"] = public_error(record.error)
    return GenerationView.model_construct(
        **fields,
        artifacts=artifacts,
        queue_position=queue_position if record.status is Status.queued else None,
    )


def view_json(view: BaseModel) -> bytes:
    """The response body of a view: the JSON FastAPI would render for it as a ``response_model``
    (every field, JSON mode, compact, UTF-8), rendered once and without validating the view again."""
    return view.model_dump_json().encode("utf-8")


def public_error(error: ErrorInfo | None) -> ErrorInfo | None:
    """``error`` as a client may see it: its code with the code's fixed public sentence."""
    if error is None:
        return None
    message = public_message(error.code)
    return error if error.message == message else ErrorInfo(code=error.code, message=message)


# ------------------------------------------------------------------------------------------- catalog


class RatesView(BaseModel):
    currency: Literal["USD"] = "USD"
    per_second: dict[str, str] = Field(description="USD per output second, by resolution (decimal strings).")
    audio_per_second: str = Field(description="USD per output second added when audio is on.")


class VariantView(BaseModel):
    steps: int
    rate_multiplier: str = Field(description="Applied to the model's rates (decimal string).")
    available: bool = Field(
        description=(
            "A live worker hosting the model can run this variant (it has the variant's weights, e.g. its LoRA)."
        )
    )


class ModeView(BaseModel):
    inputs: list[str] = Field(
        description=(
            'What the mode needs in `input`: "prompt", and "image" for image_to_video '
            "(input.image_url, https, or input.image, a data: URI of a JPEG, PNG or WebP image)."
        )
    )
    variants: dict[str, VariantView]


class ModelView(BaseModel):
    id: str
    object: Literal["model"] = "model"
    display_name: str
    family: str
    modes: dict[str, ModeView]
    resolutions: list[str]
    ratios: list[str]
    durations: list[int]
    defaults: dict[str, str | int | bool]
    fps: int
    audio: bool
    prompt_extend: bool
    prompt_max_chars: int
    rates: RatesView
    available: bool = Field(description="A live worker hosting this model sent a heartbeat recently.")
    queue_depth: int = Field(description="Generations of this model waiting for a worker.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelView]


def model_view(
    spec: ModelSpec, *, available: bool, queue_depth: int, serves: Callable[[str, str], bool] | None = None
) -> ModelView:
    """``serves(mode, variant)``: whether a live worker can run that variant (default: whenever ``available``)."""
    return ModelView(
        id=spec.id,
        display_name=spec.display_name,
        family=spec.family,
        modes={
            name: ModeView(
                inputs=list(mode_inputs(name)),
                variants={
                    v: VariantView(
                        steps=variant.steps,
                        rate_multiplier=str(variant.rate_multiplier),
                        available=available and (serves is None or serves(name, v)),
                    )
                    for v, variant in mode.variants.items()
                },
            )
            for name, mode in spec.modes.items()
        },
        resolutions=list(spec.resolutions),
        ratios=list(spec.ratios),
        durations=list(spec.durations),
        defaults=dict(spec.defaults),
        fps=spec.fps,
        audio=spec.audio,
        prompt_extend=spec.prompt_extend is not None,
        prompt_max_chars=spec.prompt_max_chars,
        rates=RatesView(
            per_second={label: str(rate) for label, rate in spec.rates.per_second.items()},
            audio_per_second=str(spec.rates.audio_per_second),
        ),
        available=available,
        queue_depth=queue_depth,
    )


def retry_after_s(record: GenerationRecord, api: ApiSettings, now: datetime) -> int | None:
    """Seconds a client should wait before the next poll; None once the generation is terminal.

    The spec's cadence: about 5 s right after create, then 10-15 s with jitter so a crowd of clients
    created together does not poll in lockstep.
    """
    if record.terminal:
        return None
    if (now - record.created_at).total_seconds() < api.poll_first_window_s:
        return api.poll_first_s
    return random.randint(api.poll_min_s, max(api.poll_min_s, api.poll_max_s))

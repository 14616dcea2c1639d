"""Turning a create call into a queued record: parse, resolve against the catalog, price, fingerprint.

Everything is validated before anything is enqueued, so a refused request leaves no trace. The stored
parameters are the resolved ones (catalog defaults and a seed filled in) so a retried attempt, or the
client reading the record, sees exactly what is generated.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from api.errors import ApiError
from api.input_image import read_image_source, stored_image
from foundation.core.catalog import Catalog
from foundation.core.contract import (
    CreateRequest,
    GenerationRecord,
    RecordInput,
    RecordParameters,
)
from foundation.core.errors import ErrorCode
from foundation.core.images import CheckedImage, check_image
from foundation.core.intake import read_create_request
from foundation.core.resolve import check_inputs, image_cover_size, resolve

if TYPE_CHECKING:
    from foundation.queue.base import WorkerHeartbeat
    from foundation.settings import InputSettings, Settings

__all__ = [
    "IDEMPOTENCY_HEADER",
    "build_record",
    "check_hosted",
    "check_idempotency_key",
    "new_generation_id",
    "parse_body",
    "prepare_image",
    "request_hash",
    "takes_image",
]

IDEMPOTENCY_HEADER = "Idempotency-Key"
_IDEMPOTENCY_KEY = re.compile(r"[\x20-\x7e]{1,255}")


def check_idempotency_key(value: str | None) -> str | None:
    """None when absent; the key when it is 1-255 printable ASCII characters; else 400."""
    if value is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(value):
        raise ApiError(
            400,
            ErrorCode.invalid_request,
            "Idempotency-Key must be 1 to 255 printable ASCII characters",
            IDEMPOTENCY_HEADER,
        )
    return value


def parse_body(body: bytes, catalog: Catalog) -> CreateRequest:
    """Decode JSON and read it against the catalog (its defaults for ``mode`` and ``variant``, its sentences:
    ``foundation.core.intake``); malformed JSON is ``invalid_request``, bad fields their own code."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # ValueError covers JSONDecodeError and bad UTF-8
        raise ApiError(400, ErrorCode.invalid_request, "request body is not valid JSON") from None
    return read_create_request(data, catalog)


def request_hash(request: CreateRequest, *, image_sha256: str | None = None) -> str:
    """SHA-256 of the parsed request in canonical JSON: equal requests hash equal whatever their
    key order, whitespace or explicit nulls.

    An input image counts by its content (``image_sha256`` of the stored copy), not by how it came: the
    same key with another image is a conflict, the same image by URL or by data URI a replay. A webhook
    counts (another ``webhook_url`` is a conflict); a request without one, and without ``parameters.preview``,
    hashes as it did before those were fields, so a create retried across an upgrade is still a replay."""
    data = request.model_dump(mode="json")
    for name in ("webhook_url", "webhook_events"):
        if data[name] is None:
            del data[name]
    if data["parameters"].get("preview") is None:  # likewise the preview switch, unset
        data["parameters"].pop("preview", None)
    data["input"].pop("image_url", None)
    data["input"].pop("image", None)
    if image_sha256 is not None:
        data["input"]["image_sha256"] = image_sha256
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def takes_image(request: CreateRequest, catalog: Catalog) -> bool:
    """Whether the request's mode takes an image (and it brings exactly one); a coded ``RequestRejected``
    for an unknown model, mode or variant, an image its mode does not take, or a missing one."""
    return check_inputs(request, catalog)


def prepare_image(request: CreateRequest, catalog: Catalog, inputs: InputSettings) -> CheckedImage:
    """The checked input image of a request that ``takes_image``; raises a coded ``RequestRejected`` for an
    unreachable, refused or bad image. Decoded no larger than the generation size it will be fitted to
    (``foundation.core.images``). Blocking (fetch, decode): routes run it in a thread, under the API's
    bound on images at once (``api.input_image.ImageSlots``)."""
    image_cover_size(request, catalog, 1, 1)  # a choice the model does not offer is refused before any fetch
    data, param = read_image_source(request.input, inputs)
    return check_image(
        data,
        max_bytes=inputs.max_image_bytes,
        max_pixels=inputs.max_image_pixels,
        param=param,
        cover=lambda width, height: image_cover_size(request, catalog, width, height),
    )


def new_generation_id() -> str:
    return "gen_" + uuid.uuid4().hex


def build_record(
    request: CreateRequest,
    catalog: Catalog,
    *,
    project: str,
    max_attempts: int,
    image: CheckedImage | None = None,
) -> GenerationRecord:
    """The queued record for a valid request; raises ``RequestRejected`` when the catalog refuses it.
    ``image``: the checked input image (``prepare_image``), recorded with the key it is to be stored under."""
    generation_id = new_generation_id()
    stored = stored_image(image, generation_id) if image is not None else None
    job, hold = resolve(request, catalog, image=stored)
    parameters = request.parameters.model_dump()
    parameters.update(
        resolution=job.resolution,
        ratio=job.ratio,
        duration_seconds=job.duration_seconds,
        audio=job.audio,
        prompt_extend=job.prompt_extend,
        seed=job.seed,  # drawn by resolve when absent; stored so every attempt reproduces it
    )
    return GenerationRecord(
        id=generation_id,
        project=project,
        model=request.model,
        mode=request.mode,
        variant=request.variant,
        parameters=RecordParameters(**parameters),
        input=RecordInput(prompt=request.input.prompt, image=stored),
        price_hold=hold,
        max_attempts=max_attempts,
    )


def check_hosted(
    record: GenerationRecord,
    catalog: Catalog,
    settings: Settings,
    live_workers: Callable[[], Iterable[WorkerHeartbeat]],
) -> None:
    """Refuse (400 ``invalid_parameter``) a job no worker of this service could run, where
    ``api.unhosted_models`` says so (by default in embedded mode, whose one worker is all there is; a fleet
    on Redis accepts it, since a worker for it may be started on demand: scale from zero): a catalog model
    no worker hosts (param ``model``), or a variant whose weights (its LoRA) no live worker hosting the model
    has (param ``variant``; workers leave such variants out of their heartbeat)."""
    policy = settings.api.unhosted_models
    if policy == "accept" or (policy == "auto" and settings.queue.backend != "sqlite"):
        return
    model = record.model
    needs_weights = catalog.models[model].modes[record.mode].variants[record.variant].lora is not None
    if model in settings.worker.hosted_models and not needs_weights:  # the common case reads no heartbeat
        return
    hosting = [beat for beat in live_workers() if model in beat.hosted_models]
    if model not in settings.worker.hosted_models and not hosting:
        hosted = ", ".join(settings.worker.hosted_models)
        raise ApiError(
            400,
            ErrorCode.invalid_parameter,
            f"model {model!r} is in the catalog but no worker of this service hosts it (hosted: {hosted}); "
            "it would wait for ever. Add it to worker.hosted_models (GENWORKER_WORKER__HOSTED_MODELS)",
            "model",
        )
    if needs_weights and hosting and not any(beat.serves(model, record.mode, record.variant) for beat in hosting):
        raise ApiError(
            400,
            ErrorCode.invalid_parameter,
            f"variant {record.variant!r} of model {model!r} needs weights that no worker of this service has; "
            "choose another variant (GET /v1/models shows which are available)",
            "variant",
        )

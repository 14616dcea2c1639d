"""Turning a create call into a queued record: parse, resolve against the catalog, price, fingerprint,
enqueue. ``submit`` is the one create path of ``/v1/generations`` and ``/v1/videos``.

Everything is validated before anything is enqueued, so a refused request leaves no trace. The stored
parameters are the resolved ones (catalog defaults and a seed filled in) so a retried attempt, or the
client reading the record, sees exactly what is generated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import anyio

from api.errors import ApiError, UrlRefused
from api.input_image import ImageSlots, store_image, stored_image
from foundation.core.catalog import Catalog
from foundation.core.contract import (
    CreateRequest,
    GenerationRecord,
    RecordInput,
    RecordParameters,
    StoredImage,
    WebhookEvent,
)
from foundation.core.errors import ErrorCode, GenworkerError, IdempotencyConflict, public_message
from foundation.core.images import CheckedImage, check_image
from foundation.core.intake import read_create_request
from foundation.core.resolve import check_inputs, image_cover_size, resolve
from foundation.queue.base import Polled
from foundation.queue.errors import ProjectQueueFull

if TYPE_CHECKING:
    from api.auth import Principal
    from api.context import ApiContext
    from foundation.queue.base import WorkerHeartbeat
    from foundation.settings import InputSettings, Settings

__all__ = [
    "IDEMPOTENCY_HEADER",
    "QUEUE_FULL_RETRY_AFTER_S",
    "build_record",
    "check_hosted",
    "check_idempotency_key",
    "needs_live_workers",
    "new_generation_id",
    "parse_body",
    "prepare_image",
    "request_hash",
    "submit",
    "takes_image",
]

log = logging.getLogger("genworker.api")

IDEMPOTENCY_HEADER = "Idempotency-Key"
# ``Retry-After`` of a create refused for its project's ``queue.fair.max_queued``: about one short job's
# run, after which a slot of that project's queue has likely freed (docs/operators.md).
QUEUE_FULL_RETRY_AFTER_S = 30
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


async def prepare_image(
    slots: ImageSlots, request: CreateRequest, catalog: Catalog, inputs: InputSettings, project: str
) -> CheckedImage:
    """The checked input image of a request that ``takes_image``; raises a coded ``RequestRejected`` for an
    unreachable, refused or bad image. Decoded no larger than the generation size it will be fitted to
    (``foundation.core.images``). Fetched and decoded off the event loop, under the API's bounds on images
    at once (``api.input_image.ImageSlots``: the fetch in the project's share, the decode in a slot of all)."""
    image_cover_size(request, catalog, 1, 1)  # a choice the model does not offer is refused before any fetch
    return await slots.prepare(
        request.input,
        project,
        lambda data, param: check_image(
            data,
            max_bytes=inputs.max_image_bytes,
            max_pixels=inputs.max_image_pixels,
            param=param,
            cover=lambda width, height: image_cover_size(request, catalog, width, height),
        ),
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


def _needs_weights(record: GenerationRecord, catalog: Catalog) -> bool:
    return catalog.models[record.model].modes[record.mode].variants[record.variant].lora is not None


def needs_live_workers(record: GenerationRecord, catalog: Catalog, settings: Settings) -> bool:
    """Whether ``check_hosted`` must read the live workers for ``record``: not where the policy accepts
    every catalog model, nor in the common case of a hosted model whose variant needs no weights."""
    policy = settings.api.unhosted_models
    if policy == "accept" or (policy == "auto" and settings.queue.backend != "sqlite"):
        return False
    return record.model not in settings.worker.hosted_models or _needs_weights(record, catalog)


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
    if not needs_live_workers(record, catalog, settings):
        return
    model = record.model
    needs_weights = _needs_weights(record, catalog)
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


async def submit(
    ctx: ApiContext,
    principal: Principal,
    create: CreateRequest,
    idempotency_key: str | None,
    *,
    image: CheckedImage | None = None,
) -> Polled:
    """A parsed create, from its input image to the queue: the one create path of ``/v1/generations`` and
    ``/v1/videos``. The stored record and its place in the queue; ``replayed`` when an earlier create with
    the same Idempotency-Key made it. A coded ``RequestRejected`` or ``ApiError`` (409 for a key used with
    another request) when it is refused; nothing is left stored then.

    ``image``: the input image, already read and checked by the caller (an upload); the request then names
    no image source. Else the request's own source (``input.image_url`` or ``input.image``) is read, fetched,
    decoded and checked off the event loop, before anything is stored. A ``webhook_url`` is checked against
    the outbound rules and kept for the generation (``api.webhooks``) before the image is stored."""
    if image is None and takes_image(create, ctx.catalog):
        image = await prepare_image(ctx.images, create, ctx.catalog, ctx.settings.api.inputs, principal.project)
    record = build_record(
        create, ctx.catalog, project=principal.project, max_attempts=ctx.settings.queue.max_attempts, image=image
    )
    if needs_live_workers(record, ctx.catalog, ctx.settings):
        beats = await ctx.queue.live_workers()
        check_hosted(record, ctx.catalog, ctx.settings, lambda: beats)
    if create.webhook_url is not None:  # checked (and kept) before anything else is stored
        await _keep_webhook(ctx, record, create.webhook_url, create.webhook_events)
    stored = record.input.image
    if image is not None and stored is not None:  # stored before the job exists: a worker may claim it at once
        await anyio.to_thread.run_sync(store_image, ctx.store, stored, image.data)
    fingerprint = request_hash(create, image_sha256=stored.sha256 if stored else None)
    return await _enqueue(ctx, record, stored, idempotency_key, fingerprint)


async def _enqueue(
    ctx: ApiContext, record: GenerationRecord, stored: StoredImage | None, idempotency_key: str | None, fingerprint: str
) -> Polled:
    """``record`` into the queue; its stored input image deleted again when no job of its own keeps it (a
    replay, a conflict, a project queue that is full)."""
    try:
        created = await ctx.queue.enqueue(record, idempotency_key=idempotency_key, request_hash=fingerprint)
    except IdempotencyConflict as e:
        await _discard_image(ctx, stored)
        raise ApiError(
            409,
            ErrorCode.idempotency_conflict,
            f"Idempotency-Key was already used with a different request body (generation {e.job_id})",
            IDEMPOTENCY_HEADER,
        ) from None
    except ProjectQueueFull:
        # Nothing was enqueued and the key was not kept: the same create is accepted once room frees up.
        await _discard_image(ctx, stored)
        raise ApiError(
            429,
            ErrorCode.queue_full,
            public_message(ErrorCode.queue_full),
            headers={"Retry-After": str(QUEUE_FULL_RETRY_AFTER_S)},
        ) from None
    if created.replayed:
        await _discard_image(ctx, stored)  # the replayed generation has its own copy
    return created


async def _discard_image(ctx: ApiContext, image: StoredImage | None) -> None:
    """Delete an input image stored for a generation that was not created (a replay or a conflict)."""
    if image is None:
        return
    try:
        await anyio.to_thread.run_sync(ctx.store.delete, image.key)
    except GenworkerError as e:  # best effort: the answer stands; the object stays until swept
        log.warning("could not delete an unused input image", extra={"key": image.key, "error": str(e)})


async def _keep_webhook(ctx: ApiContext, record: GenerationRecord, url: str, events: list[WebhookEvent] | None) -> None:
    """Keep the create's own webhook for its generation: a coded 400 for a URL the outbound rules refuse,
    or where this service sends no webhooks."""
    if ctx.webhooks is None:
        raise ApiError(
            400, ErrorCode.unsupported_parameter, "this service sends no webhooks: leave webhook_url out", "webhook_url"
        )
    try:
        await anyio.to_thread.run_sync(ctx.webhooks.add_request_webhook, record.id, record.project, url, events)
    except UrlRefused as e:
        raise ApiError(400, ErrorCode.invalid_webhook_url, str(e), "webhook_url") from None

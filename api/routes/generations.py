"""``/v1/generations``: create (202, idempotent), read, list and cancel a project's generations.

Create and read, the calls a client repeats (a poll every few seconds per generation), are async
routes: the key comes from the key cache (``api/auth.py``), the queue is awaited through the API's
``AsyncApiQueue`` (``foundation/queue/async_api.py``), and the view's JSON is rendered once into the
response (``api/views.view_json``), so no threadpool hop and no second validation of the view. List
and cancel stay sync routes over the sync queue. Both paths answer with the same bodies and headers.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, StringConstraints, TypeAdapter, ValidationError

from api.auth import Principal, bearer, presented_key
from api.context import ApiContext
from api.create import (
    IDEMPOTENCY_HEADER,
    build_record,
    check_hosted,
    check_idempotency_key,
    parse_body,
    prepare_image,
    request_hash,
    takes_image,
)
from api.error_handlers import responses_for
from api.errors import ApiError, UrlRefused
from api.input_image import store_image
from api.keys import Scope
from api.query import only_query
from api.views import GenerationList, GenerationView, generation_view, view_json
from foundation.core.contract import CreateRequest, GenerationRecord, Status, StoredImage, WebhookEvent, utcnow
from foundation.core.errors import ErrorCode, GenworkerError, IdempotencyConflict, UnknownJob, public_message
from foundation.core.images import CheckedImage
from foundation.queue.base import Polled
from foundation.queue.errors import ProjectQueueFull
from foundation.settings import ApiSettings

__all__ = ["CREATE_ROUTE", "POLL_ROUTE", "answer_create", "answer_poll", "build_router", "retry_after_s", "submit"]

log = logging.getLogger("genworker.api")

# The create's and the poll's route templates (the metrics' route labels; api/fast_path.py answers
# both outside the framework).
CREATE_ROUTE = "/v1/generations"
POLL_ROUTE = "/v1/generations/{generation_id}"
_ID_DOC = "Generation id as returned by create."
# ``Retry-After`` of a create refused for its project's ``queue.fair.max_queued``: about one short job's
# run, after which a slot of that project's queue has likely freed (docs/operators.md).
QUEUE_FULL_RETRY_AFTER_S = 30
_GENERATION_ID = Path(min_length=1, max_length=128, description=_ID_DOC)
_IDEMPOTENCY_DOC = "One stable key per logical generation; retries with it are safe for 24 h."
_IDEMPOTENCY_PATTERN = r"^[\x20-\x7e]+$"

# The create and read routes, the hot ones, declare no FastAPI parameters or dependencies: resolving
# them cost more than the rest of a poll (docs/benchmarks.md). They read the request themselves with
# the same rules, the same errors and the same order (query, body, key, header or path), and document
# what they read here, as FastAPI documents the other routes' parameters.
_ID = TypeAdapter(Annotated[str, StringConstraints(min_length=1, max_length=128)])
_IDEMPOTENCY_KEY = TypeAdapter(
    Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=_IDEMPOTENCY_PATTERN)]
)
_SECURITY: list[dict[str, list[str]]] = [{"bearerAuth": []}]
_ID_PARAMETER = {
    "name": "generation_id",
    "in": "path",
    "required": True,
    "description": _ID_DOC,
    "schema": {"type": "string", "minLength": 1, "maxLength": 128, "title": "Generation Id", "description": _ID_DOC},
}
_IDEMPOTENCY_PARAMETER = {
    "name": IDEMPOTENCY_HEADER,
    "in": "header",
    "required": False,
    "description": _IDEMPOTENCY_DOC,
    "schema": {
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": 255, "pattern": _IDEMPOTENCY_PATTERN},
            {"type": "null"},
        ],
        "title": IDEMPOTENCY_HEADER,
        "description": _IDEMPOTENCY_DOC,
    },
}
_no_query = only_query().dependency  # the dependency's own check, called directly


def _invalid(source: str, name: str, value: str, error: ValidationError) -> RequestValidationError:
    """The error FastAPI raises for a parameter that fails validation (answered 400 by api/errors.py)."""
    first = error.errors(include_url=False)[0]
    return RequestValidationError([{"type": first["type"], "loc": (source, name), "msg": first["msg"], "input": value}])


def _path_param(request: Request, name: str, adapter: TypeAdapter[str]) -> str:
    value: str = request.path_params[name]
    try:
        return adapter.validate_python(value)
    except ValidationError as e:
        raise _invalid("path", name, value, e) from None


def _header(request: Request, name: str, adapter: TypeAdapter[str]) -> str | None:
    value = request.headers.get(name)
    if value is None:
        return None
    try:
        return adapter.validate_python(value)
    except ValidationError as e:
        raise _invalid("header", name, value, e) from None


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


def _not_cancelable(record: GenerationRecord) -> ApiError:
    return ApiError(
        409,
        ErrorCode.not_cancelable,
        f"generation {record.id!r} has already ended ({record.status.value}); "
        "only a queued or running one can be canceled",
        "id",
    )


def _rendered(
    ctx: ApiContext, view: BaseModel, status: int, headers: dict[str, str], record: GenerationRecord
) -> Response:
    """The view's JSON as the response (the route's ``response_model`` documents it)."""
    seconds = retry_after_s(record, ctx.settings.api, utcnow())
    if seconds is not None:
        headers = {**headers, "Retry-After": str(seconds)}
    return Response(view_json(view), status_code=status, headers=headers, media_type="application/json")


async def answer_poll(ctx: ApiContext, request: Request) -> Response:
    """``GET /v1/generations/{generation_id}``: the checks in the order FastAPI's dependencies made them
    (query, key, path), then the key's scope and rate limit with the poll itself, then the view."""
    await _no_query(request)
    api_key = await presented_key(request)
    generation_id = _path_param(request, "generation_id", _ID)
    principal, polled = await ctx.auth.authorize_poll(api_key, Scope.generations_read, generation_id, ctx.aqueue)
    # Another project's generation is "not found", not "forbidden": ids must not leak.
    if polled is None or polled.record.project != principal.project:
        raise ApiError(404, ErrorCode.not_found, f"no generation {generation_id!r}", "id")
    view = generation_view(polled.record, ctx.store, queue_position=polled.position)
    return _rendered(ctx, view, 200, {}, polled.record)


async def answer_create(ctx: ApiContext, request: Request) -> Response:
    """``POST /v1/generations``: the checks in the order FastAPI's dependencies made them (query, body,
    key, header), then the key, the body, the image, the queue."""
    await _no_query(request)
    body = await request.body()
    api_key = await presented_key(request)
    idempotency_key = _header(request, IDEMPOTENCY_HEADER, _IDEMPOTENCY_KEY)
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    idem_key = check_idempotency_key(idempotency_key)
    created = await submit(ctx, principal, parse_body(body, ctx.catalog), idem_key)
    headers = {"Location": f"/v1/generations/{created.record.id}"}
    if created.replayed:
        headers = {"Idempotent-Replayed": "true", **headers}
    view = generation_view(created.record, ctx.store, queue_position=created.position)
    return _rendered(ctx, view, 202, headers, created.record)


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
        image = await ctx.images.run(lambda: prepare_image(create, ctx.catalog, ctx.settings.api.inputs))
    record = build_record(
        create, ctx.catalog, project=principal.project, max_attempts=ctx.settings.queue.max_attempts, image=image
    )
    check_hosted(record, ctx.catalog, ctx.settings, ctx.queue.live_workers)
    if create.webhook_url is not None:  # checked (and kept) before anything else is stored
        await _keep_webhook(ctx, record, create.webhook_url, create.webhook_events)
    stored = record.input.image
    if image is not None and stored is not None:  # stored before the job exists: a worker may claim it at once
        await anyio.to_thread.run_sync(store_image, ctx.store, stored, image.data)
    fingerprint = request_hash(create, image_sha256=stored.sha256 if stored else None)
    try:
        created = await ctx.aqueue.enqueue(record, idempotency_key=idempotency_key, request_hash=fingerprint)
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


def build_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(prefix=CREATE_ROUTE, tags=["generations"])
    # The presented key (401 at once when missing); each route checks it first thing in its body: the
    # async routes await ``ctx.auth.authorize``, the sync ones call ``ctx.auth.principal`` on their
    # thread (api/auth.py).
    key = Depends(bearer)
    api = ctx.settings.api

    def owned(generation_id: str, principal: Principal) -> GenerationRecord:
        record = ctx.queue.get(generation_id)
        # Another project's generation is "not found", not "forbidden": ids must not leak.
        if record is None or record.project != principal.project:
            raise ApiError(404, ErrorCode.not_found, f"no generation {generation_id!r}", "id")
        return record

    def view(record: GenerationRecord, with_position: bool = True) -> GenerationView:
        position = ctx.queue.position(record.id) if with_position and not record.terminal else None
        return generation_view(record, ctx.store, queue_position=position)

    def hint(response: Response, record: GenerationRecord) -> None:
        seconds = retry_after_s(record, api, utcnow())
        if seconds is not None:
            response.headers["Retry-After"] = str(seconds)

    @router.post(
        "",
        status_code=202,
        response_model=GenerationView,
        summary="Create a generation",
        responses=responses_for(401, 403, 409, 413, 429),
        openapi_extra={
            "parameters": [_IDEMPOTENCY_PARAMETER],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateRequest"}}},
            },
            "security": _SECURITY,
        },
    )
    async def create_generation(request: Request) -> Response:
        return await answer_create(ctx, request)  # also called outside the framework: api/fast_path.py

    @router.get(
        "",
        response_model=GenerationList,
        dependencies=[only_query("limit", "cursor")],
        summary="List this project's generations, newest first",
        responses=responses_for(401, 403, 429),
    )
    def list_generations(
        api_key: str = key,
        limit: int = Query(20, ge=1, le=api.list_max_limit),
        cursor: str | None = Query(None, min_length=1, max_length=512),
    ) -> GenerationList:
        principal = ctx.auth.principal(api_key, Scope.generations_read)
        try:
            records, next_cursor = ctx.queue.list_jobs(principal.project, limit=limit, cursor=cursor)
        except ValueError:
            raise ApiError(400, ErrorCode.invalid_parameter, "cursor is not valid", "cursor") from None
        return GenerationList(data=[view(r, with_position=False) for r in records], next_cursor=next_cursor)

    @router.get(
        POLL_ROUTE.removeprefix(router.prefix),
        response_model=GenerationView,
        summary="Get a generation (poll until a terminal status)",
        responses=responses_for(401, 403, 404, 429),
        openapi_extra={"parameters": [_ID_PARAMETER], "security": _SECURITY},
    )
    async def get_generation(request: Request) -> Response:
        return await answer_poll(ctx, request)  # also called outside the framework: api/fast_path.py

    @router.post(
        "/{generation_id}/cancel",
        response_model=GenerationView,
        dependencies=[only_query()],
        summary="Cancel a generation (queued: at once; running: at the next denoising step)",
        responses=responses_for(401, 403, 404, 409, 429),
    )
    def cancel_generation(
        response: Response, generation_id: Annotated[str, _GENERATION_ID], api_key: str = key
    ) -> GenerationView:
        record = owned(generation_id, ctx.auth.principal(api_key, Scope.generations_write))
        if record.terminal:
            raise _not_cancelable(record)
        try:
            record = ctx.queue.cancel(generation_id)
        except UnknownJob:
            raise ApiError(404, ErrorCode.not_found, f"no generation {generation_id!r}", "id") from None
        # It may have finished between the read and the cancel: only our own cancel may end it.
        if record.terminal and record.status is not Status.canceled:
            raise _not_cancelable(record)
        hint(response, record)
        return view(record)

    return router

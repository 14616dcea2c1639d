"""``/v1/generations``: create (202, idempotent), read, list and cancel a project's generations.

Every route is async and awaits the API's one queue (``ApiContext.queue``, ``AsyncApiQueue``), the key's
authorization (``ctx.auth.authorize``) and the create path (``api/create.py``); routes are declared here
once, with FastAPI dependencies (``Depends(context)`` for the app's context). Create and read, the calls a
client repeats (a poll every few seconds per generation), declare no dependencies at all and render the
view's JSON once into the response (``api/views.view_json``); the fast path (``api/fast_path.py``) answers
them with the same functions, outside the framework. Both paths answer with the same bodies and headers.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, StringConstraints, TypeAdapter, ValidationError

from api.api_keys import Scope
from api.auth import bearer, presented_key
from api.context import ApiContext, context
from api.create import IDEMPOTENCY_HEADER, check_idempotency_key, parse_body, submit
from api.error_handlers import responses_for
from api.errors import ApiError
from api.ownership import owned_polled, owned_record
from api.query import only_query, page_limit
from api.views import GenerationList, GenerationView, generation_view, retry_after_s, view_json
from foundation.core.contract import GenerationRecord, Status, utcnow
from foundation.core.errors import ErrorCode, UnknownJob
from foundation.queue.base import read_list_cursor

__all__ = ["CREATE_ROUTE", "POLL_ROUTE", "answer_create", "answer_poll", "retry_after_s", "router"]

# The create's and the poll's route templates (the metrics' route labels; api/fast_path.py answers
# both outside the framework).
CREATE_ROUTE = "/v1/generations"
POLL_ROUTE = "/v1/generations/{generation_id}"
_ID_DOC = "Generation id as returned by create."
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
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    polled = await owned_polled(ctx, generation_id, principal, _not_found(generation_id))
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


async def _view(ctx: ApiContext, record: GenerationRecord) -> GenerationView:
    position = None if record.terminal else await ctx.queue.position(record.id)
    return generation_view(record, ctx.store, queue_position=position)


def _not_found(generation_id: str) -> ApiError:
    return ApiError(404, ErrorCode.not_found, f"no generation {generation_id!r}", "id")


router = APIRouter(prefix=CREATE_ROUTE, tags=["generations"])
# The presented key (401 at once when missing); each route authorizes it first thing in its body
# (``ctx.auth.authorize``: the key, then its rate limit, then its scope; api/auth.py).
_KEY = Depends(bearer)
_CONTEXT = Depends(context)


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
    return await answer_create(context(request), request)  # also called outside the framework: api/fast_path.py


@router.get(
    "",
    response_model=GenerationList,
    dependencies=[only_query("limit", "cursor")],
    summary="List this project's generations, newest first",
    responses=responses_for(401, 403, 429),
)
async def list_generations(
    api_key: str = _KEY,
    limit: int = Depends(page_limit),
    cursor: str | None = Query(None, min_length=1, max_length=512),
    ctx: ApiContext = _CONTEXT,
) -> GenerationList:
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    try:
        if cursor is not None:
            read_list_cursor(cursor)
    except ValueError:
        raise ApiError(400, ErrorCode.invalid_parameter, "cursor is not valid", "cursor") from None
    # Records this version cannot read are left out and counted (``skipped``), never the whole list's error.
    page = await ctx.queue.list_page(principal.project, limit=limit, cursor=cursor)
    data = [generation_view(r, ctx.store, queue_position=None) for r in page.records]
    return GenerationList(data=data, next_cursor=page.next_cursor, skipped=page.skipped)


@router.get(
    POLL_ROUTE.removeprefix(CREATE_ROUTE),
    response_model=GenerationView,
    summary="Get a generation (poll until a terminal status)",
    responses=responses_for(401, 403, 404, 410, 429),
    openapi_extra={"parameters": [_ID_PARAMETER], "security": _SECURITY},
)
async def get_generation(request: Request) -> Response:
    return await answer_poll(context(request), request)  # also called outside the framework: api/fast_path.py


@router.post(
    "/{generation_id}/cancel",
    response_model=GenerationView,
    dependencies=[only_query()],
    summary="Cancel a generation (queued: at once; running: at the next denoising step)",
    responses=responses_for(401, 403, 404, 409, 429),
)
async def cancel_generation(
    response: Response,
    generation_id: Annotated[str, _GENERATION_ID],
    api_key: str = _KEY,
    ctx: ApiContext = _CONTEXT,
) -> GenerationView:
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    record = await owned_record(ctx, generation_id, principal, _not_found(generation_id))
    if record.terminal:
        raise _not_cancelable(record)
    try:
        record = await ctx.queue.cancel(generation_id)
    except UnknownJob:
        raise _not_found(generation_id) from None
    # It may have finished between the read and the cancel: only our own cancel may end it.
    if record.terminal and record.status is not Status.canceled:
        raise _not_cancelable(record)
    seconds = retry_after_s(record, ctx.settings.api, utcnow())
    if seconds is not None:
        response.headers["Retry-After"] = str(seconds)
    return await _view(ctx, record)

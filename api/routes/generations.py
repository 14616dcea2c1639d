"""``/v1/generations``: create (202, idempotent), read, list and cancel a project's generations."""

from __future__ import annotations

import random
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from api.auth import Principal, bearer
from api.context import ApiContext
from api.create import IDEMPOTENCY_HEADER, build_record, check_idempotency_key, parse_body, request_hash
from api.errors import ApiError, responses_for
from api.keys import Scope
from api.query import only_query
from api.views import GenerationList, GenerationView, generation_view
from worker.core.contract import GenerationRecord, Status, utcnow
from worker.core.errors import ErrorCode, IdempotencyConflict, UnknownJob
from worker.settings import ApiSettings

__all__ = ["build_router", "retry_after_s"]

_GENERATION_ID = Path(min_length=1, max_length=128, description="Generation id as returned by create.")


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


def _not_cancelable(record: GenerationRecord) -> ApiError:
    return ApiError(409, ErrorCode.not_cancelable, f"generation {record.id!r} is already {record.status.value}", "id")


async def _raw_body(request: Request) -> bytes:
    return await request.body()


def build_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/generations", tags=["generations"])
    # The presented key (401 at once when missing); each route checks it first thing in its body, so
    # the key lookup shares the route's one threadpool hop (api/auth.py).
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
        dependencies=[only_query()],
        summary="Create a generation",
        responses=responses_for(401, 403, 409, 413, 429),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateRequest"}}},
            }
        },
    )
    def create_generation(
        response: Response,
        body: Annotated[bytes, Depends(_raw_body)],
        idempotency_key: Annotated[
            str | None,
            Header(
                alias=IDEMPOTENCY_HEADER,
                min_length=1,
                max_length=255,
                pattern=r"^[\x20-\x7e]+$",
                description="One stable key per logical generation; retries with it are safe for 24 h.",
            ),
        ] = None,
        api_key: str = key,
    ) -> GenerationView:
        principal = ctx.auth.principal(api_key, Scope.generations_write)
        idem_key = check_idempotency_key(idempotency_key)
        request = parse_body(body)
        record = build_record(
            request, ctx.catalog, project=principal.project, max_attempts=ctx.settings.queue.max_attempts
        )
        try:
            result = ctx.queue.enqueue(record, idempotency_key=idem_key, request_hash=request_hash(request))
        except IdempotencyConflict as e:
            raise ApiError(
                409,
                ErrorCode.idempotency_conflict,
                f"Idempotency-Key was already used with a different request body (generation {e.job_id})",
                IDEMPOTENCY_HEADER,
            ) from None
        if result.replayed:
            response.headers["Idempotent-Replayed"] = "true"
        response.headers["Location"] = f"/v1/generations/{result.record.id}"
        hint(response, result.record)
        return view(result.record)

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
        "/{generation_id}",
        response_model=GenerationView,
        dependencies=[only_query()],
        summary="Get a generation (poll until a terminal status)",
        responses=responses_for(401, 403, 404, 429),
    )
    def get_generation(
        response: Response, generation_id: Annotated[str, _GENERATION_ID], api_key: str = key
    ) -> GenerationView:
        record = owned(generation_id, ctx.auth.principal(api_key, Scope.generations_read))
        hint(response, record)
        return view(record)

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

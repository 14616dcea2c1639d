"""``/v1/videos``: the Videos API as the openai SDK (``client.videos``) and vLLM-Omni's clients call it.

A translation layer, never a second store: a create goes through the one create path of ``/v1/generations``
(``api.create.submit``: the same records, queue, image checks, idempotency and hosted-model rules), under
the same keys, scopes and rate limits, and a video id is the generation's id, readable on both surfaces.
The request is read in ``api/video_requests.py`` and mapped onto the catalog in ``api/video_mapping.py``; the
record is shown in ``api/video_views.py``.

======================================  ==========  ======================================================
route                                   scope       answer
======================================  ==========  ======================================================
``POST /v1/videos``                     write       200 ``Video`` (``queued``); ``Idempotency-Key`` honoured
``GET /v1/videos``                      read        the project's videos: ``after`` (an id), ``limit``, ``order``
``GET /v1/videos/{id}``                 read        ``Video``, with ``Retry-After`` and ``openai-poll-after-ms``
                                                    while it is not done (the SDK's ``poll`` waits that long)
``GET /v1/videos/{id}/content``         read        ``variant=video`` (MP4) or ``thumbnail`` (JPEG): the bytes
                                                    from the local store, a 302 to a fresh signed URL on S3
``DELETE /v1/videos/{id}``              write       its files and record removed, then 404 for the id; 409
                                                    ``not_deletable`` while it is queued or running
``POST .../{id}/remix``, ``/edits``,    write       400 ``unsupported_mode``: these models make video from a
``/extensions``, ``/characters``                    prompt (and an image), not from another video
======================================  ==========  ======================================================

Every failure on these routes answers in the OpenAI error shape (``video_views.openai_error``); the
routes stay out of the service's OpenAPI document: this surface follows OpenAI's, documented in
docs/client.md ("Using the OpenAI SDK").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.routing import APIRoute
from starlette.responses import FileResponse, RedirectResponse

from api.api_keys import Scope
from api.auth import bearer, presented_key
from api.context import ApiContext, context
from api.create import IDEMPOTENCY_HEADER, check_idempotency_key, submit
from api.error_handlers import error_answer
from api.errors import ApiError, unreadable_record_error
from api.ownership import owned_polled, owned_record
from api.query import only_query, page_limit
from api.video_mapping import as_video_rejection, to_create_request, video_param
from api.video_requests import VideoUpload, read_video_create
from api.video_views import Video, VideoDeleted, VideoList, openai_error, video_view
from api.views import retry_after_s, view_json
from foundation.core.contract import CreateRequest, GenerationRecord, Status, utcnow
from foundation.core.errors import ErrorCode, RequestRejected, UnknownJob
from foundation.core.images import CheckedImage, check_image
from foundation.core.resolve import image_cover_size
from foundation.queue.base import list_cursor
from foundation.queue.errors import UnreadableRecord
from foundation.stores.base import artifact_prefix
from foundation.stores.local import LocalStore

__all__ = ["VIDEOS_ROUTE", "router"]

VIDEOS_ROUTE = "/v1/videos"
_VIDEO_ID = Path(min_length=1, max_length=128, description="Video id (a generation id) as returned by create.")
# ``variant`` of the content route → the artifact kind that holds it.
_CONTENT = {"video": "video", "thumbnail": "poster"}
_UNSUPPORTED = "{} is not supported by this model: it makes video from a prompt (and an image, input_reference)"


class OpenAIErrorRoute(APIRoute):
    """A route whose failures, its dependencies' included, answer in the OpenAI error shape. An unexpected
    exception is left to the app's outermost handler (a 500 in the service's shape, its traceback logged)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                response, unexpected = await error_answer(request, exc)
                if unexpected:
                    raise
                return openai_error(response)

        return answer


def _not_found(video_id: str) -> ApiError:
    return ApiError(404, ErrorCode.not_found, f"no video {video_id!r}", "video_id")


def _view(ctx: ApiContext, record: GenerationRecord) -> Video:
    return video_view(record, record_ttl_s=ctx.settings.queue.record_ttl_days * 86400)


def _answer(
    ctx: ApiContext, record: GenerationRecord, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    headers = dict(headers or {})
    seconds = retry_after_s(record, ctx.settings.api, utcnow())
    if seconds is not None:  # the SDK's poll() waits openai-poll-after-ms between retrieves
        headers |= {"Retry-After": str(seconds), "openai-poll-after-ms": str(seconds * 1000)}
    return Response(view_json(_view(ctx, record)), status_code=status, headers=headers, media_type="application/json")


async def _checked_upload(ctx: ApiContext, upload: VideoUpload, create: CreateRequest) -> CheckedImage | None:
    """The uploaded ``input_reference``, decoded and checked off the event loop before anything is stored,
    within the process's bound on decodes at once; None without one."""
    if upload.image is None:
        return None
    inputs = ctx.settings.api.inputs
    check = functools.partial(
        check_image,
        upload.image,
        max_bytes=inputs.max_image_bytes,
        max_pixels=inputs.max_image_pixels,
        param="input_reference",
        cover=functools.partial(image_cover_size, create, ctx.catalog),
    )
    return await ctx.images.run(check)


router = APIRouter(prefix=VIDEOS_ROUTE, tags=["videos"], route_class=OpenAIErrorRoute, include_in_schema=False)
_KEY = Depends(bearer)
_CONTEXT = Depends(context)


@router.post("", dependencies=[only_query()])
async def create_video(request: Request, ctx: ApiContext = _CONTEXT) -> Response:
    api_key = await presented_key(request)
    idempotency_key = check_idempotency_key(request.headers.get(IDEMPOTENCY_HEADER))
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    upload = await read_video_create(request, max_image_bytes=ctx.settings.api.inputs.max_image_bytes)
    try:
        create = to_create_request(upload.fields, ctx.catalog, uploaded=upload.image is not None)
        image = await _checked_upload(ctx, upload, create)
        created = await submit(ctx, principal, create, idempotency_key, image=image)
    # The shared path names generations' fields (parameters.duration_seconds, input.image): name this API's.
    except RequestRejected as e:
        raise as_video_rejection(e) from None
    except ApiError as e:
        raise ApiError(e.status, e.code, e.message, video_param(e.param), e.headers) from None
    headers = {"Location": f"{VIDEOS_ROUTE}/{created.record.id}"}
    if created.replayed:
        headers["Idempotent-Replayed"] = "true"
    return _answer(ctx, created.record, 200, headers)


async def _list_anchor(ctx: ApiContext, after: str, project: str) -> str:
    """The listing cursor just past the project's video ``after``; 400 when it has none of that id."""
    no_anchor = ApiError(400, ErrorCode.invalid_parameter, f"after: no video {after!r}", "after")
    try:
        anchor = await ctx.queue.get(after)
    except UnreadableRecord as e:
        raise unreadable_record_error(e, project, no_anchor) from None
    if anchor is None or anchor.project != project:
        raise no_anchor
    return list_cursor(anchor)


@router.get("", response_model=VideoList, dependencies=[only_query("after", "limit", "order")])
async def list_videos(
    after: str | None = Query(None, min_length=1, max_length=128, description="The last id of the previous page."),
    limit: int = Depends(page_limit),
    order: Literal["asc", "desc"] = Query("desc", description="By creation: desc, newest first (default)."),
    api_key: str = _KEY,
    ctx: ApiContext = _CONTEXT,
) -> VideoList:
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    cursor = None if after is None else await _list_anchor(ctx, after, principal.project)
    # Records this version cannot read are left out and counted (``skipped``), never the whole list's error.
    page = await ctx.queue.list_page(principal.project, limit=limit, cursor=cursor, oldest_first=order == "asc")
    data = [_view(ctx, r) for r in page.records]
    return VideoList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=page.next_cursor is not None,
        skipped=page.skipped,
    )


@router.get("/{video_id}", dependencies=[only_query()])
async def retrieve_video(video_id: str = _VIDEO_ID, api_key: str = _KEY, ctx: ApiContext = _CONTEXT) -> Response:
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    polled = await owned_polled(ctx, video_id, principal, _not_found(video_id))
    return _answer(ctx, polled.record)


@router.get("/{video_id}/content", dependencies=[only_query("variant")])
async def download_content(
    video_id: str = _VIDEO_ID,
    variant: str = Query("video", max_length=64, description="video (the MP4) or thumbnail (a JPEG frame)."),
    api_key: str = _KEY,
    ctx: ApiContext = _CONTEXT,
) -> Response:
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    record = await owned_record(ctx, video_id, principal, _not_found(video_id))
    kind = _CONTENT.get(variant)
    if kind is None:
        offered = ", ".join(_CONTENT)
        raise ApiError(400, ErrorCode.invalid_parameter, f"variant {variant!r} is not offered: {offered}", "variant")
    if record.status is not Status.succeeded:
        state = _view(ctx, record).status
        raise ApiError(404, ErrorCode.not_found, f"video {video_id!r} is {state}: it has no content", "video_id")
    artifact = next((a for a in record.artifacts if a.kind == kind), None)
    if artifact is None:
        raise ApiError(404, ErrorCode.not_found, f"video {video_id!r} has no {variant}", "variant")
    if isinstance(ctx.store, LocalStore):  # the API serves the local store's files itself
        path = ctx.store.path_for(artifact.key)
        if not await anyio.to_thread.run_sync(path.is_file):  # gone with its record's retention
            raise ApiError(404, ErrorCode.not_found, f"video {video_id!r} has no {variant} any more", "variant")
        return FileResponse(path, media_type=artifact.content_type)
    return RedirectResponse(ctx.store.sign_url(artifact.key).url, status_code=302)


def _delete_objects(ctx: ApiContext, video_id: str) -> None:
    """Every object under the generation's prefix: its artifacts, its input image, a failed attempt's
    leftovers (blocking: the store's calls, on a worker thread)."""
    for object_key in [o.key for o in ctx.store.list_objects(artifact_prefix(video_id))]:
        ctx.store.delete(object_key)


@router.delete("/{video_id}", response_model=VideoDeleted, dependencies=[only_query()])
async def delete_video(video_id: str = _VIDEO_ID, api_key: str = _KEY, ctx: ApiContext = _CONTEXT) -> VideoDeleted:
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    record = await owned_record(ctx, video_id, principal, _not_found(video_id))
    if not record.terminal:
        raise ApiError(
            409,
            ErrorCode.not_deletable,
            f"video {video_id!r} is {_view(ctx, record).status}: delete it once it has completed or failed "
            f"(cancel it first: POST /v1/generations/{video_id}/cancel)",
            "video_id",
        )
    await anyio.to_thread.run_sync(_delete_objects, ctx, video_id)
    try:
        await ctx.queue.delete(video_id)
    except UnknownJob:  # deleted meanwhile by another request
        raise _not_found(video_id) from None
    return VideoDeleted(id=video_id)


async def _unsupported(ctx: ApiContext, operation: str, api_key: str) -> Response:
    await ctx.auth.authorize(api_key, Scope.generations_write)
    raise ApiError(400, ErrorCode.unsupported_mode, _UNSUPPORTED.format(operation), None)


@router.post("/{video_id}/remix")
async def remix_video(video_id: str = _VIDEO_ID, api_key: str = _KEY, ctx: ApiContext = _CONTEXT) -> Response:
    return await _unsupported(ctx, "remix", api_key)


@router.post("/edits")
async def edit_video(api_key: str = _KEY, ctx: ApiContext = _CONTEXT) -> Response:
    return await _unsupported(ctx, "edit", api_key)


@router.post("/extensions")
async def extend_video(api_key: str = _KEY, ctx: ApiContext = _CONTEXT) -> Response:
    return await _unsupported(ctx, "extend", api_key)


@router.post("/characters")
async def create_character(api_key: str = _KEY, ctx: ApiContext = _CONTEXT) -> Response:
    return await _unsupported(ctx, "a character", api_key)

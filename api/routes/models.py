"""``GET /v1/models``: the public catalog with live availability and queue depth. No key needed.

Anyone may call it, so it is the cheapest call of the API rather than its dearest: the body is computed
at most once per ``REFRESH_S`` per process (one read of the live workers, one queue depth per model,
no write anywhere) and served from memory in between, with an ``ETag`` (a request whose
``If-None-Match`` names it is answered 304 with no body) and ``Cache-Control: max-age`` of a few
seconds, so clients and proxies ask less. Availability and depth are then up to ``REFRESH_S`` old, which
no client can tell from a heartbeat that lands a moment later. Like a poll, it is answered before the
framework's routing and middleware (``api/fast_path.py``) when it carries no query string.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from fastapi import APIRouter, Request, Response

from api.context import ApiContext
from api.error_handlers import responses_for
from api.query import only_query
from api.views import ModelList, ModelView, model_view
from foundation.core.catalog import ModelSpec

__all__ = ["MAX_AGE_S", "MODELS_ROUTE", "REFRESH_S", "CatalogBody", "answer_models", "build_router", "catalog_body"]

MODELS_ROUTE = "/v1/models"

REFRESH_S = 1.0  # the body is computed at most this often per process
MAX_AGE_S = 3  # what clients and proxies may reuse it for


@dataclass(frozen=True)
class _Rendered:
    body: bytes
    etag: str
    at: float  # time.monotonic() when computed


class CatalogBody:
    """The catalog's JSON and its ETag, computed by ``compute`` (blocking: queue reads, on a worker thread)
    at most once per ``REFRESH_S``; concurrent callers of a stale body wait for the one computation."""

    def __init__(self, compute: Callable[[], bytes], clock: Callable[[], float] = time.monotonic) -> None:
        self._compute = compute
        self._clock = clock
        self._rendered: _Rendered | None = None
        self._lock = anyio.Lock()

    def _fresh(self) -> _Rendered | None:
        rendered = self._rendered
        return rendered if rendered is not None and self._clock() - rendered.at < REFRESH_S else None

    async def get(self) -> tuple[bytes, str]:
        rendered = self._fresh()
        if rendered is None:
            async with self._lock:
                rendered = self._fresh()  # another caller may have computed it while this one waited
                if rendered is None:
                    at = self._clock()
                    body = await anyio.to_thread.run_sync(self._compute)
                    rendered = _Rendered(body, f'"{hashlib.sha256(body).hexdigest()[:32]}"', at)
                    self._rendered = rendered
        return rendered.body, rendered.etag


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


def catalog_body(ctx: ApiContext) -> CatalogBody:
    """The process's catalog body: live workers and queue depths read at most once per ``REFRESH_S``."""

    def compute() -> bytes:
        beats = ctx.queue.live_workers()
        hosted = {model for beat in beats for model in beat.hosted_models}

        def view(spec: ModelSpec) -> ModelView:
            def serves(mode: str, variant: str) -> bool:
                return any(beat.serves(spec.id, mode, variant) for beat in beats)

            return model_view(spec, available=spec.id in hosted, queue_depth=ctx.queue.depth(spec.id), serves=serves)

        return ModelList(data=[view(spec) for spec in ctx.catalog.models.values()]).model_dump_json().encode()

    return CatalogBody(compute)


async def answer_models(catalog: CatalogBody, request: Request) -> Response:
    """``GET /v1/models``: the body, or 304 when ``If-None-Match`` names its tag (also called outside the
    framework: api/fast_path.py)."""
    body, etag = await catalog.get()
    headers = {"ETag": etag, "Cache-Control": f"max-age={MAX_AGE_S}"}
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def build_router(catalog: CatalogBody) -> APIRouter:
    router = APIRouter(prefix=MODELS_ROUTE, tags=["models"])

    @router.get(
        "",
        response_model=ModelList,
        summary="The model catalog",
        description=(
            f"Computed at most once a second per API process; `ETag` (send it back as `If-None-Match` for "
            f"a 304) and `Cache-Control: max-age={MAX_AGE_S}`."
        ),
        responses={**responses_for(), 304: {"description": "Not modified: the body named by `If-None-Match`."}},
        dependencies=[only_query()],
    )
    async def list_models(request: Request) -> Response:
        return await answer_models(catalog, request)

    return router

"""``create_app``: the public HTTP tier over a queue, an artifact store, the catalog and a key store.

Dependencies are passed in, never looked up: ``genworker api`` and ``genworker up`` build them from
settings, tests build them over real backends. Routes live in ``api/routes``; the error shape in
``api/errors``; auth in ``api/auth``; the probes in ``api/health``; the access log and request ids in
``api/access_log``.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp

from api import health
from api.access_log import AccessLogMiddleware
from api.api_keys import KeyStore
from api.auth import Authenticator, KeyCache
from api.catalog_body import catalog_body
from api.context import ApiContext
from api.error_handlers import install_error_handlers
from api.event_stream import StreamSlots
from api.fast_path import FastPath
from api.input_image import ImageSlots
from api.limits import BodyLimitMiddleware, MemoryLimiter, RateLimiter, RateLimitHeadersMiddleware
from api.metrics import ApiMetrics, install_metrics
from api.playground import install_playground
from api.routes import events, generations, models, videos
from api.webhooks import routes as webhook_routes
from api.webhooks.service import Webhooks
from foundation.core.catalog import Catalog
from foundation.core.contract import CreateRequest
from foundation.queue.async_api import OffloadedQueue
from foundation.queue.base import ApiQueue, AsyncApiQueue
from foundation.settings import Settings
from foundation.stores.base import ArtifactStore
from foundation.stores.local import ARTIFACTS_PATH

__all__ = ["create_app"]

_DESCRIPTION = """Asynchronous video generation. Create a generation (`202`, `status: queued`), poll it by id
following `Retry-After` until a terminal status (`succeeded`, `failed`, `canceled`), then download each
artifact through its short-lived signed `download_url` (re-signed on every GET).

Every error has the body `{"error": {"code", "message", "param"}}` with a stable `code`."""


def create_app(
    settings: Settings,
    *,
    queue: ApiQueue,
    store: ArtifactStore,
    catalog: Catalog,
    keys: KeyStore,
    limiter: RateLimiter | None = None,
    artifacts_app: ASGIApp | None = None,
    async_queue: AsyncApiQueue | None = None,
    key_cache: KeyCache | None = None,
    webhooks: Webhooks | None = None,
    fast_path: bool = False,
) -> FastAPI:
    """Build the app. ``artifacts_app`` (the local store's file server) is mounted where the local store's
    signed URLs point (``ARTIFACTS_PATH``) in the embedded mode; with S3 they point at the store itself.

    The routes use one queue, async only: ``async_queue`` (default: ``queue`` on a small executor of its
    own, ``foundation/queue/async_api.py``). ``limiter`` is the per-key rate limit (default: the in-process
    window of ``api.rate_limit_per_s``), ``key_cache`` sets the key cache's bound (``api/auth.py``). The app
    closes the async queue, the limiter and the authenticator's threads at shutdown (lifespan); ``queue``
    and ``keys`` stay its opener's to close. ``webhooks`` (optional) adds ``/v1/webhooks`` and runs its
    sender thread, if it has one, for the app's lifetime (``api/webhooks``). ``fast_path``
    (``api.fast_path``) answers polls, creates and the catalog in front of the framework's routing and
    middleware, as they would answer (the tests compare both)."""
    api = settings.api
    api_queue = async_queue or OffloadedQueue(queue)
    ctx = ApiContext(
        settings=settings,
        queue=api_queue,
        store=store,
        catalog=catalog,
        keys=keys,
        auth=Authenticator(keys, limiter or MemoryLimiter(api.rate_limit_per_s, api.rate_limit_burst), cache=key_cache),
        images=ImageSlots(api.inputs),
        streams=StreamSlots(api.events_max_streams_per_key),
        models=catalog_body(api_queue, catalog),  # one per process: the route and the fast path share it
        webhooks=webhooks,
    )
    app = FastAPI(
        title="genworker",
        version="1",
        description=_DESCRIPTION,
        openapi_url="/v1/openapi.json",
        docs_url="/docs" if api.docs else None,
        redoc_url=None,
        lifespan=functools.partial(_lifespan, ctx),
    )
    app.state.context = ctx  # what the routes' ``Depends(context)`` reads (api/context.py)
    install_error_handlers(app)
    _include_routes(app, ctx, artifacts_app)
    metrics = _add_middleware(app, ctx)
    if fast_path:  # polls, creates and the catalog answered before the framework's stack (api/fast_path.py)
        _install_fast_path(app, ctx, metrics)
    app.openapi = functools.partial(_openapi, app)  # type: ignore[method-assign]
    return app


@asynccontextmanager
async def _lifespan(ctx: ApiContext, _: FastAPI) -> AsyncIterator[None]:
    """The webhook sender for the app's lifetime; then the queue, limiter and auth threads closed."""
    if ctx.webhooks is not None:
        ctx.webhooks.start()
    yield
    if ctx.webhooks is not None:
        ctx.webhooks.stop()
    await ctx.queue.aclose()
    await ctx.auth.limiter.aclose()
    ctx.auth.close()


def _include_routes(app: FastAPI, ctx: ApiContext, artifacts_app: ASGIApp | None) -> None:
    app.include_router(health.router)
    app.include_router(generations.router)
    app.include_router(events.router)  # GET /v1/generations/{id}/events (SSE)
    app.include_router(models.router)
    app.include_router(videos.router)  # /v1/videos: the openai SDK's Videos API over the same records
    if ctx.webhooks is not None:
        app.include_router(webhook_routes.router)
    install_playground(app, ctx)  # only where api.playground is on
    if artifacts_app is not None:
        app.mount(ARTIFACTS_PATH, artifacts_app, name="artifacts")


def _add_middleware(app: FastAPI, ctx: ApiContext) -> ApiMetrics:
    """The middleware, innermost first; the metrics they feed."""
    api = ctx.settings.api
    app.add_middleware(RateLimitHeadersMiddleware)  # RateLimit-* on every keyed answer, set by api/auth.py
    # A /v1/videos create uploads its image in the body (multipart): that route takes an image of the size an
    # image_url fetch may bring, plus the usual body for its other fields.
    upload = {("POST", "/v1/videos"): api.inputs.max_image_bytes + api.max_body_bytes}
    app.add_middleware(BodyLimitMiddleware, max_bytes=api.max_body_bytes, routes=upload)
    metrics = install_metrics(app)
    if ctx.webhooks is not None:  # the sender's figures beside the API's own, at the same /metrics
        metrics.registry.register(ctx.webhooks.metrics.registry)
    app.add_middleware(AccessLogMiddleware)  # outermost: its line times and ids everything inside
    return metrics


def _install_fast_path(app: FastAPI, ctx: ApiContext, metrics: ApiMetrics) -> None:
    """``FastPath`` in front of the framework's middleware stack, built when the app first starts."""
    build_stack = app.build_middleware_stack

    def build_with_fast_path() -> ASGIApp:
        return FastPath(
            build_stack(),
            poll=functools.partial(generations.answer_poll, ctx),
            create=functools.partial(generations.answer_create, ctx),
            models=functools.partial(models.answer_models, ctx.models),
            metrics=metrics,
            max_body_bytes=ctx.settings.api.max_body_bytes,
        )

    app.build_middleware_stack = build_with_fast_path  # type: ignore[method-assign]


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document, made once (``_openapi_schema``)."""
    if app.openapi_schema is None:
        app.openapi_schema = _openapi_schema(app)
    return app.openapi_schema


def _openapi_schema(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    # The create body is read raw (so malformed JSON gets our 400, not FastAPI's 422); its model is
    # added here for the requestBody reference the route declares.
    request_schema = CreateRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(request_schema.pop("$defs", {}))
    components["CreateRequest"] = request_schema
    # FastAPI documents a 422 for every route with parameters; ours answer 400 instead.
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return schema

"""Building the API's backends from ``Settings`` and serving it with uvicorn (``genworker api``).

The distributed mode runs N replicas of this process over one Redis (queue, keys, rate limits) and
one S3-compatible store; nothing is held in a replica that another needs, except the in-process
rate-limit window used with the SQLite key store (the embedded mode has one API process).
"""

from __future__ import annotations

import gc
import logging
import signal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from api.api_keys import KeyStore, RedisKeyStore, SqliteKeyStore
from api.errors import ServerStopped
from api.limits import AsyncRedisLimiter, MemoryLimiter, RateLimiter, RedisLimiter
from foundation.core.logs import configure_logging
from foundation.settings import Settings

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI
    from starlette.types import ASGIApp

    from foundation.stores.base import ArtifactStore

__all__ = [
    "api_bounded",
    "artifacts_app_for",
    "build_app",
    "keys_backend",
    "make_server",
    "open_key_store",
    "open_limiter",
    "serve",
]

log = logging.getLogger("genworker.api")


def api_bounded(settings: Settings) -> Settings:
    """``settings`` with the API's own Redis socket timeout (``api.queue_timeout_s``) for every client it opens."""
    queue = settings.queue.model_copy(update={"socket_timeout_s": settings.api.queue_timeout_s})
    return settings.model_copy(update={"queue": queue})


def keys_backend(settings: Settings) -> Literal["sqlite", "redis"]:
    if settings.api.keys_backend != "auto":
        return settings.api.keys_backend
    return "redis" if settings.queue.backend == "redis" else "sqlite"


def _keys_redis_url(settings: Settings) -> str:
    return settings.api.keys_redis_url or settings.queue.redis_url


def _keys_redis(settings: Settings) -> Any:
    """A client in the queue's Redis mode (single, cluster, sentinel; TLS/ACL): keys live beside the queue."""
    from foundation.queue.redis.connect import redis_client

    return redis_client(settings.queue, url=_keys_redis_url(settings))


def open_key_store(settings: Settings) -> KeyStore:
    if keys_backend(settings) == "redis":
        return RedisKeyStore(_keys_redis(settings))
    return SqliteKeyStore(Path(settings.data_dir) / "keys.db")


def open_limiter(settings: Settings) -> RateLimiter:
    """The per-key rate limit beside the keys: in this process with the SQLite key store (one API process);
    on Redis, shared by every replica, over an asyncio client where Redis is one server, else (Sentinel,
    Cluster) over the sync client on threads of the limiter's own."""
    from foundation.queue.redis.async_queue import async_redis_client

    api = settings.api
    if keys_backend(settings) != "redis":
        return MemoryLimiter(api.rate_limit_per_s, api.rate_limit_burst)
    client = async_redis_client(settings.queue, url=_keys_redis_url(settings))
    if client is None:
        return RedisLimiter(_keys_redis(settings), api.rate_limit_per_s, api.rate_limit_burst)
    return AsyncRedisLimiter(client, api.rate_limit_per_s, api.rate_limit_burst)


def artifacts_app_for(store: ArtifactStore) -> ASGIApp | None:
    """The local store serves its own signed files; an S3 store's URLs point at S3 instead."""
    from api.artifacts import artifact_app
    from foundation.stores.local import LocalStore

    return artifact_app(store) if isinstance(store, LocalStore) else None


def build_app(settings: Settings) -> FastAPI:
    """The app over the backends the settings name (queue, store, keys, catalog)."""
    from api.app import create_app
    from api.webhooks.service import open_webhooks
    from foundation.core.catalog import load_catalog
    from foundation.queue.async_api import open_async_queue
    from foundation.queue.factory import open_queue
    from foundation.stores.factory import open_store

    store = open_store(settings.store, data_dir=settings.data_dir)
    settings = api_bounded(settings)
    queue = open_queue(settings.queue)
    async_queue = open_async_queue(settings.queue, queue)
    webhooks = open_webhooks(settings, queue=queue if settings.webhooks.sender_in_api else None)
    return create_app(
        settings,
        queue=queue,
        store=store,
        catalog=load_catalog(settings.catalog_path),
        keys=open_key_store(settings),
        limiter=open_limiter(settings),
        artifacts_app=artifacts_app_for(store),
        async_queue=async_queue,
        webhooks=webhooks,
        fast_path=settings.api.fast_path,
    )


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise ServerStopped


def make_server(app: FastAPI, host: str, port: int, *, log_level: str = "info") -> uvicorn.Server:
    """uvicorn with every log line in the worker's JSON format: uvicorn's own access log is off (the
    app's ``AccessLogMiddleware`` writes one line per request, with its request id and without the
    query string) and ``log_config=None`` leaves uvicorn's loggers to the JSON root handler."""
    import uvicorn

    configure_logging(log_level)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level.lower(), access_log=False, log_config=None)
    return uvicorn.Server(config)


def serve(server: uvicorn.Server) -> None:
    """Run uvicorn until SIGINT/SIGTERM (or ``server.should_exit``); return after a graceful shutdown.

    uvicorn re-raises the signal it caught once it has shut down; a SIGTERM handler that raises lets
    the caller's ``finally`` run instead of the process dying on the default action.

    Before serving, what the process holds (modules, the app, the catalog: about 10^5 objects) is moved
    out of the garbage collector's view (``gc.freeze``): a full collection walked them all, a pause of
    tens of milliseconds for every request in flight (the poll's p99, docs/benchmarks.md), to find
    nothing, since they live as long as the process.
    """
    gc.collect()
    gc.freeze()
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server.run()
    except (ServerStopped, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)

"""``CatalogBody``: the body of ``GET /v1/models``, computed at most once per ``REFRESH_S`` per process.

One read of the live workers and one queue depth per model, awaited on the queue (``AsyncApiQueue``),
then kept in memory with its ``ETag`` until it is ``REFRESH_S`` old: the route and the fast path
(``api/fast_path.py``) share one per process (``ApiContext.models``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from api.views import ModelList, ModelView, model_view
from foundation.core.catalog import Catalog, ModelSpec
from foundation.queue.base import AsyncApiQueue, WorkerHeartbeat

__all__ = ["MAX_AGE_S", "REFRESH_S", "CatalogBody", "catalog_body"]

REFRESH_S = 1.0  # the body is computed at most this often per process
MAX_AGE_S = 3  # what clients and proxies may reuse it for


@dataclass(frozen=True)
class _Rendered:
    body: bytes
    etag: str
    at: float  # time.monotonic() when computed


class CatalogBody:
    """The catalog's JSON and its ETag, computed by ``compute`` (awaited: queue reads) at most once per
    ``REFRESH_S``; concurrent callers of a stale body wait for the one computation."""

    def __init__(self, compute: Callable[[], Awaitable[bytes]], clock: Callable[[], float] = time.monotonic) -> None:
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
                    body = await self._compute()
                    rendered = _Rendered(body, f'"{hashlib.sha256(body).hexdigest()[:32]}"', at)
                    self._rendered = rendered
        return rendered.body, rendered.etag


def _model_view(spec: ModelSpec, beats: list[WorkerHeartbeat], depth: int) -> ModelView:
    def serves(mode: str, variant: str) -> bool:
        return any(beat.serves(spec.id, mode, variant) for beat in beats)

    available = any(spec.id in beat.hosted_models for beat in beats)
    return model_view(spec, available=available, queue_depth=depth, serves=serves)


def catalog_body(queue: AsyncApiQueue, catalog: Catalog) -> CatalogBody:
    """The process's catalog body: live workers and queue depths read at most once per ``REFRESH_S``."""

    async def compute() -> bytes:
        beats = await queue.live_workers()
        views = [_model_view(spec, beats, await queue.depth(spec.id)) for spec in catalog.models.values()]
        return ModelList(data=views).model_dump_json().encode()

    return CatalogBody(compute)

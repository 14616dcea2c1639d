"""The queue's asyncio face for the API tier: ``open_async_queue`` picks an ``AsyncApiQueue``.

- Redis, one server: ``redis_async.AsyncRedisQueue``, awaited on the event loop (no thread at all).
- Anything else (SQLite; Redis through Sentinel or Cluster): ``OffloadedQueue``, the sync queue's calls
  on a small executor of the queue's own. Its threads are few and long-lived, so SQLite keeps one
  connection per thread of a fixed set (``sqlite_db``), however the server is loaded.

SQLite's polls run inline, on the event loop (``reads_inline``): in WAL mode a read never waits for a
writer, and a poll's two indexed reads take tens of microseconds, less than handing the call to a
thread and back (which, on a busy machine, waits for the scheduler as well: docs/benchmarks.md). A
create waits for its commit's fsync, so it always goes to the executor. (A reader can still be held up
where SQLite says so: a WAL left by a crashed process is recovered by the next reader, within
``busy_timeout``.) Redis through Sentinel or Cluster is network I/O: every call goes to the executor.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from worker.core.contract import GenerationRecord
from worker.queue.base import ApiQueue, AsyncApiQueue, Polled
from worker.queue.config import QueueSettings
from worker.queue.redis_async import AsyncRedisQueue

__all__ = ["OFFLOAD_THREADS", "OffloadedQueue", "open_async_queue"]

T = TypeVar("T")

# Threads of an ``OffloadedQueue``: SQLite reads run side by side in WAL mode, writes take turns on
# one lock anyway, and more threads than this only add GIL hand-offs on a small machine.
OFFLOAD_THREADS = 4


def open_async_queue(settings: QueueSettings, queue: ApiQueue) -> AsyncApiQueue:
    """The asyncio path to the queue ``queue`` (opened from ``settings`` by ``factory.open_queue``)."""
    if settings.backend == "redis":
        native = AsyncRedisQueue.open(settings)
        if native is not None:
            return native
        return OffloadedQueue(queue)
    return OffloadedQueue(queue, reads_inline=True)


class OffloadedQueue:
    """``AsyncApiQueue`` over a sync ``ApiQueue``: each call runs on this object's own executor, but
    polls run inline when ``reads_inline`` (a local SQLite file: see the module's docstring)."""

    def __init__(self, queue: ApiQueue, *, threads: int = OFFLOAD_THREADS, reads_inline: bool = False) -> None:
        self.queue = queue
        self.reads_inline = reads_inline
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="genworker-queue")

    async def _run(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def poll(self, job_id: str) -> Polled | None:
        if self.reads_inline:
            return self._poll(job_id)
        return await self._run(functools.partial(self._poll, job_id))

    def _poll(self, job_id: str) -> Polled | None:
        record = self.queue.get(job_id)
        if record is None:
            return None
        return Polled(record, None if record.terminal else self.queue.position(job_id))

    async def enqueue(
        self, record: GenerationRecord, *, idempotency_key: str | None = None, request_hash: str | None = None
    ) -> Polled:
        return await self._run(functools.partial(self._enqueue, record, idempotency_key, request_hash))

    def _enqueue(self, record: GenerationRecord, idempotency_key: str | None, request_hash: str | None) -> Polled:
        result = self.queue.enqueue(record, idempotency_key=idempotency_key, request_hash=request_hash)
        stored = result.record
        position = None if stored.terminal else self.queue.position(stored.id)
        return Polled(stored, position, replayed=result.replayed)

    async def aclose(self) -> None:
        """Stop the executor's threads (the wrapped queue stays open: its opener closes it)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

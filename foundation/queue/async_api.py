"""The queue's asyncio face for the API tier: ``open_async_queue`` picks an ``AsyncApiQueue``.

- Redis, one server: ``redis.async_queue.AsyncRedisQueue``: polls awaited on the event loop, creates by
  the sync ``RedisQueue.enqueue`` on a thread (the backend's one create).
- Anything else (SQLite; Redis through Sentinel or Cluster): ``OffloadedQueue``, the sync queue's calls
  on a small executor of the queue's own. Its threads are few and long-lived, so SQLite keeps one
  connection per thread of a fixed set (``sqlite_db``), however the server is loaded.

SQLite's polls run inline, on the event loop (``reads_inline``): in WAL mode a read never waits for a
writer, and a poll's two indexed reads take tens of microseconds, less than handing the call to a
thread and back (which, on a busy machine, waits for the scheduler as well: docs/benchmarks.md). A
create waits for its commit's fsync, so it always goes to the executor. (A reader can still be held up
where SQLite says so: a WAL left by a crashed process is recovered by the next reader, within
``busy_timeout``.) Redis through Sentinel or Cluster is network I/O: every call goes to the executor.

SQLite's creates each go to the executor and commit on their own. With ``queue.sqlite_group_commit`` on
they go in batches (``enqueue_many``): the creates that arrive while one batch is being written wait for
it, then go together, one hand-off to a thread and one transaction (one fsync) for all of them
(``sqlite.group``). Each is answered once its batch committed. Every path creates through the backend's
one ``enqueue`` (SQLite's is ``enqueue_many`` of one).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from foundation.core.contract import GenerationRecord
from foundation.queue.base import ApiQueue, AsyncApiQueue, EnqueueResult, Polled
from foundation.queue.config import QueueSettings
from foundation.queue.offload import OffloadedCalls
from foundation.queue.redis.async_queue import AsyncRedisQueue
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.sqlite.backend import SqliteQueue

__all__ = ["MAX_CREATE_BATCH", "OFFLOAD_THREADS", "OffloadedQueue", "open_async_queue"]

T = TypeVar("T")

# Threads of an ``OffloadedQueue``: SQLite reads run side by side in WAL mode, writes take turns on
# one lock anyway, and more threads than this only add GIL hand-offs on a small machine.
OFFLOAD_THREADS = 4


# Creates handed to the executor in one batch at most.
MAX_CREATE_BATCH = 64

# One create: the record, its idempotency key and request hash (``enqueue``'s arguments).
Create = tuple[GenerationRecord, str | None, str | None]


def open_async_queue(settings: QueueSettings, queue: ApiQueue) -> AsyncApiQueue:
    """The asyncio path to the queue ``queue`` (opened from ``settings`` by ``factory.open_queue``)."""
    if settings.backend == "redis":
        native = AsyncRedisQueue.open(settings, queue) if isinstance(queue, RedisQueue) else None
        if native is not None:
            return native
        return OffloadedQueue(queue)
    many = queue.enqueue_many if isinstance(queue, SqliteQueue) and settings.sqlite_group_commit else None
    return OffloadedQueue(queue, reads_inline=True, enqueue_many=many)


class OffloadedQueue(OffloadedCalls):
    """``AsyncApiQueue`` over a sync ``ApiQueue``: each call runs on this object's own executor, but
    polls run inline when ``reads_inline`` (a local SQLite file: see the module's docstring), and
    creates go in batches when the queue has ``enqueue_many`` (each create's result or exception)."""

    def __init__(
        self,
        queue: ApiQueue,
        *,
        threads: int = OFFLOAD_THREADS,
        reads_inline: bool = False,
        enqueue_many: Callable[[list[Create]], list[EnqueueResult | Exception]] | None = None,
    ) -> None:
        self.queue = queue
        self.reads_inline = reads_inline
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="genworker-queue")
        self._enqueue_many = enqueue_many
        self._waiting: list[tuple[Create, asyncio.Future[Polled]]] = []
        self._writing: asyncio.Task[None] | None = None

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
        if self._enqueue_many is None:
            return await self._run(functools.partial(self._enqueue, record, idempotency_key, request_hash))
        answer: asyncio.Future[Polled] = asyncio.get_running_loop().create_future()
        self._waiting.append(((record, idempotency_key, request_hash), answer))
        if self._writing is None:
            self._writing = asyncio.create_task(self._write_batches())
        return await answer

    async def _write_batches(self) -> None:
        """Hand the waiting creates to the executor a batch at a time, until none is waiting."""
        try:
            while self._waiting:
                batch = self._waiting[:MAX_CREATE_BATCH]
                del self._waiting[:MAX_CREATE_BATCH]
                try:
                    outcomes = await self._run(functools.partial(self._enqueue_batch, [c for c, _ in batch]))
                except Exception as e:  # the batch's transaction failed: none of it was created
                    outcomes = [e] * len(batch)
                for (_, answer), outcome in zip(batch, outcomes, strict=True):
                    if answer.done():  # its request went away (canceled); the create stands
                        continue
                    if isinstance(outcome, Exception):
                        answer.set_exception(outcome)
                    else:
                        answer.set_result(outcome)
        finally:
            self._writing = None

    def _enqueue_batch(self, creates: list[Create]) -> list[Polled | Exception]:
        assert self._enqueue_many is not None
        outcomes: list[Polled | Exception] = []
        for result in self._enqueue_many(creates):
            outcomes.append(result if isinstance(result, Exception) else self._polled(result))
        return outcomes

    def _enqueue(self, record: GenerationRecord, idempotency_key: str | None, request_hash: str | None) -> Polled:
        return self._polled(self.queue.enqueue(record, idempotency_key=idempotency_key, request_hash=request_hash))

    def _polled(self, result: EnqueueResult) -> Polled:
        """A create's answer: the stored job and its place in the queue."""
        stored = result.record
        return Polled(stored, None if stored.terminal else self.queue.position(stored.id), replayed=result.replayed)

    async def aclose(self) -> None:
        """Stop the executor's threads (the wrapped queue stays open: its opener closes it)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

"""``OffloadedCalls``: the API tier's occasional queue calls as coroutines, each the sync queue's own call
on a thread of the async queue's executor.

Reading one record, listing, canceling, deleting, the depths and live workers of the catalog, a job's
event logs: none of them is a poll's or a create's hot path, so every ``AsyncApiQueue`` runs them through
the backend's one sync implementation (the same rules, the same errors) instead of a second, native
asyncio copy of each. The mixin needs the async queue's ``queue`` (its sync face) and ``_executor``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from foundation.core.contract import GenerationRecord
from foundation.queue.base import ApiQueue, Event, JobPage, ProgressNote, WorkerHeartbeat

__all__ = ["OffloadedCalls"]

T = TypeVar("T")


class OffloadedCalls:
    """``AsyncApiQueue``'s calls besides ``poll`` and ``enqueue``, over ``queue`` on ``_executor``."""

    queue: ApiQueue
    _executor: ThreadPoolExecutor

    async def _offload(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def get(self, job_id: str) -> GenerationRecord | None:
        return await self._offload(functools.partial(self.queue.get, job_id))

    async def list_jobs(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> tuple[list[GenerationRecord], str | None]:
        call = functools.partial(self.queue.list_jobs, project, limit=limit, cursor=cursor, oldest_first=oldest_first)
        return await self._offload(call)

    async def list_page(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> JobPage:
        call = functools.partial(self.queue.list_page, project, limit=limit, cursor=cursor, oldest_first=oldest_first)
        return await self._offload(call)

    async def cancel(self, job_id: str) -> GenerationRecord:
        return await self._offload(functools.partial(self.queue.cancel, job_id))

    async def delete(self, job_id: str) -> GenerationRecord:
        return await self._offload(functools.partial(self.queue.delete, job_id))

    async def depth(self, model: str) -> int:
        return await self._offload(functools.partial(self.queue.depth, model))

    async def position(self, job_id: str) -> int | None:
        return await self._offload(functools.partial(self.queue.position, job_id))

    async def live_workers(self) -> list[WorkerHeartbeat]:
        return await self._offload(self.queue.live_workers)

    async def events(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[Event]:
        return await self._offload(functools.partial(self.queue.events, job_id, after=after, limit=limit))

    async def progress_notes(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[ProgressNote]:
        return await self._offload(functools.partial(self.queue.progress_notes, job_id, after=after, limit=limit))

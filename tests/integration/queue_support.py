"""Shared pieces of the queue tests: a record builder and the per-backend queue fixtures.

Test modules import the fixtures by name (``from tests.integration.queue_support import ...``), so
one contract suite runs against both backends: ``make_queue`` is parametrized over redis and sqlite.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from worker.core.contract import GenerationRecord, Money, RecordInput, RecordParameters
from worker.queue.base import JobQueue
from worker.queue.redis_backend import RedisQueue
from worker.queue.sqlite_backend import SqliteQueue

__all__ = ["BACKENDS", "make_queue", "new_record", "open_backend", "queue"]

BACKENDS = ["redis", "sqlite"]


def new_record(model: str = "tiny-wan", project: str = "proj-a", prompt: str = "a red fox") -> GenerationRecord:
    return GenerationRecord(
        id=f"gen_{uuid.uuid4().hex}",
        project=project,
        model=model,
        mode="text_to_video",
        variant="standard",
        parameters=RecordParameters(resolution="144p", duration_seconds=1, ratio="16:9"),
        input=RecordInput(prompt=prompt),
        price_hold=Money(amount="0.10"),
    )


def open_backend(backend: str, location: str, **options: Any) -> JobQueue:
    """A queue on a Redis URL or a SQLite path (also used by the crash-test consumer process)."""
    if backend == "redis":
        return RedisQueue(location, **options)
    return SqliteQueue(location, **options)


@pytest.fixture(params=BACKENDS)
def make_queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., JobQueue]]:
    """Opens queues on one fresh store per test; each call is another client (an API, a worker)."""
    location = request.getfixturevalue("redis_url") if request.param == "redis" else str(tmp_path / "queue.db")
    opened: list[JobQueue] = []

    def make(**options: Any) -> JobQueue:
        options.setdefault("lease_ttl_s", 30.0)
        q = open_backend(request.param, location, **options)
        opened.append(q)
        return q

    make.backend = request.param  # type: ignore[attr-defined]
    make.location = location  # type: ignore[attr-defined]
    yield make
    for q in opened:
        q.close()


@pytest.fixture
def queue(make_queue: Callable[..., JobQueue]) -> JobQueue:
    return make_queue()

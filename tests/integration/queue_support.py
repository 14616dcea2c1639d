"""Shared pieces of the queue tests: a record builder and the per-backend queue fixtures.

Test modules import the fixtures by name (``from tests.integration.queue_support import ...``), so
one contract suite runs against both backends: ``make_queue`` is parametrized over redis and sqlite.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import redis

from foundation.core.contract import Artifact, GenerationRecord, Money, RecordInput, RecordParameters
from foundation.queue import keys
from foundation.queue.base import JobQueue
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.sqlite.backend import SqliteQueue

__all__ = [
    "BACKENDS",
    "drop_lease",
    "make_queue",
    "new_record",
    "open_backend",
    "queue",
    "raw",
    "read_raw_record",
    "write_raw_record",
]

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


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client of the test's Redis (decoded replies), to read and write keys as another version would."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def write_raw_record(make_queue: Callable[..., JobQueue], record: GenerationRecord, **changes: Any) -> str:
    """Overwrite a stored record with JSON this version cannot read (e.g. ``status="paused"``), the way
    a newer version would during a rolling upgrade: only the record text changes. Returns the text."""
    text = json.dumps({**json.loads(record.model_dump_json()), **changes})
    location = make_queue.location  # type: ignore[attr-defined]
    if make_queue.backend == "redis":  # type: ignore[attr-defined]
        with closing(redis.Redis.from_url(location)) as client:
            client.hset(keys.job_record(record.model, record.id), "record", text)
    else:
        with closing(sqlite3.connect(location)) as conn, conn:
            conn.execute("UPDATE jobs SET record = ? WHERE id = ?", (text, record.id))
    return text


def write_newer_record(
    make_queue: Callable[..., JobQueue], record: GenerationRecord, record_format: int = 2, **changes: Any
) -> str:
    """Overwrite a stored record as a newer version writes it during a rolling upgrade: its text (with
    ``changes``, e.g. a value this version does not know) and, beside it, its newer record format."""
    text = write_raw_record(make_queue, record, **changes)
    location = make_queue.location  # type: ignore[attr-defined]
    if make_queue.backend == "redis":  # type: ignore[attr-defined]
        with closing(redis.Redis.from_url(location)) as client:
            client.hset(keys.job_record(record.model, record.id), "format", record_format)
    else:
        with closing(sqlite3.connect(location)) as conn, conn:
            conn.execute("UPDATE jobs SET record_format = ? WHERE id = ?", (record_format, record.id))
    return text


def stored_status(make_queue: Callable[..., JobQueue], record: GenerationRecord) -> tuple[str, int]:
    """The status and attempt stored beside the record (the job hash's fields, the row's columns)."""
    location = make_queue.location  # type: ignore[attr-defined]
    if make_queue.backend == "redis":  # type: ignore[attr-defined]
        with closing(redis.Redis.from_url(location, decode_responses=True)) as client:
            status, attempt = client.hmget(keys.job_record(record.model, record.id), "status", "attempt")
            return str(status), int(attempt or 0)
    with closing(sqlite3.connect(location)) as conn:
        status, attempt = conn.execute("SELECT status, attempt FROM jobs WHERE id = ?", (record.id,)).fetchone()
    return str(status), int(attempt)


def read_raw_record(make_queue: Callable[..., JobQueue], record: GenerationRecord) -> str | None:
    """The stored record text as it is, readable or not (None: no record)."""
    location = make_queue.location  # type: ignore[attr-defined]
    if make_queue.backend == "redis":  # type: ignore[attr-defined]
        with closing(redis.Redis.from_url(location, decode_responses=True)) as client:
            return client.hget(keys.job_record(record.model, record.id), "record")  # type: ignore[return-value]
    with closing(sqlite3.connect(location)) as conn:
        row = conn.execute("SELECT record FROM jobs WHERE id = ?", (record.id,)).fetchone()
    return None if row is None else str(row[0])


def drop_lease(make_queue: Callable[..., JobQueue], record: GenerationRecord) -> None:
    """Leave a running record with no lease, as a lost write or a wrongly acknowledged entry would:
    Redis: its entry acknowledged and deleted; SQLite: its token and lease deadline cleared."""
    location = make_queue.location  # type: ignore[attr-defined]
    if make_queue.backend == "redis":  # type: ignore[attr-defined]
        with closing(redis.Redis.from_url(location, decode_responses=True)) as client:
            entry = client.hget(keys.job_record(record.model, record.id), "entry")
            assert entry, "the record points at no entry"
            client.xack(keys.job_stream(record.model), keys.CONSUMER_GROUP, entry)
            client.xdel(keys.job_stream(record.model), entry)
    else:
        with closing(sqlite3.connect(location)) as conn, conn:
            conn.execute("UPDATE jobs SET token = NULL, lease_expires_at = NULL WHERE id = ?", (record.id,))


def video_artifact(key: str, size: int = 1234) -> Artifact:
    """A video artifact as a worker reports it (256x144, 16 frames at 16 fps), for outcomes in tests."""
    return Artifact(
        kind="video",
        key=key,
        content_type="video/mp4",
        bytes=size,
        sha256="0" * 64,
        width=256,
        height=144,
        fps=16.0,
        frames=16,
        duration_seconds=1.0,
    )

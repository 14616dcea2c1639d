"""Group commit on a real SQLite file (``foundation/queue/sqlite/group.py``): concurrent writes share
transactions, a failing write fails alone, a failing commit fails its whole batch, the queue's creates
keep their idempotency when they land in one transaction, and the API's creates go in batches."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from api.create import build_record
from foundation.core.catalog import load_catalog
from foundation.core.contract import GenerationRecord, parse_create_request
from foundation.core.errors import IdempotencyConflict
from foundation.queue.async_api import OffloadedQueue
from foundation.queue.sqlite.backend import SqliteQueue
from foundation.queue.sqlite.db import SqliteFile
from foundation.queue.sqlite.group import GroupCommit
from tests.e2e.conftest import create_body


def _file(path: Path) -> SqliteFile:
    db = SqliteFile(str(path), synchronous="FULL")
    db.conn().executescript(
        """CREATE TABLE IF NOT EXISTS parent (id INTEGER PRIMARY KEY);
        CREATE TABLE IF NOT EXISTS rows (n INTEGER PRIMARY KEY,
            parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);"""
    )
    return db


def _rows(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [n for (n,) in conn.execute("SELECT n FROM rows ORDER BY n")]


class _Counted(SqliteFile):
    """A file that counts its write transactions."""

    commits = 0

    def tx(self) -> Any:
        type(self).commits += 1
        return super().tx()


def _together(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` for i < n from n threads released at once; results (or exceptions) in order."""
    start = threading.Barrier(n)

    def one(i: int) -> Any:
        start.wait()
        try:
            return call(i)
        except Exception as e:
            return e

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def test_concurrent_writes_share_transactions_and_all_commit(tmp_path: Path) -> None:
    db = _Counted(str(tmp_path / "g.db"), synchronous="FULL")
    db.conn().execute("CREATE TABLE rows (n INTEGER PRIMARY KEY)")
    _Counted.commits = 0

    def write(conn: sqlite3.Connection, n: int) -> int:
        conn.execute("INSERT INTO rows VALUES (?)", (n,))
        time.sleep(0.005)  # a slow write: the others queue behind it
        return n * 10

    group: GroupCommit[int, int] = GroupCommit(db, write)
    assert _together(16, group.run) == [i * 10 for i in range(16)]
    assert _rows(tmp_path / "g.db") == list(range(16))
    assert _Counted.commits < 16  # batched: fewer transactions than writes
    _Counted.commits = 0
    assert group.run(99) == 990 and _Counted.commits == 1  # alone: its own transaction at once
    db.close()


def test_a_failing_write_fails_alone_and_leaves_nothing(tmp_path: Path) -> None:
    db = _file(tmp_path / "g.db")

    def write(conn: sqlite3.Connection, n: int) -> int:
        conn.execute("INSERT INTO rows VALUES (?, NULL)", (n,))
        time.sleep(0.002)
        if n % 3 == 0:
            raise ValueError(f"refused {n}")  # after its insert: the savepoint takes it back
        return n

    group: GroupCommit[int, int] = GroupCommit(db, write)
    results = _together(9, group.run)
    for n, result in enumerate(results):
        if n % 3 == 0:
            assert isinstance(result, ValueError) and str(result) == f"refused {n}"
        else:
            assert result == n
    assert _rows(tmp_path / "g.db") == [n for n in range(9) if n % 3]
    db.close()


def test_a_failing_commit_fails_every_write_of_its_batch(tmp_path: Path) -> None:
    db = _file(tmp_path / "g.db")
    db.conn().execute("PRAGMA foreign_keys=ON")  # this thread's connection: the one the group writes on

    def write(conn: sqlite3.Connection, n: int) -> int:
        conn.execute("INSERT INTO rows VALUES (?, ?)", (n, 7 if n == 2 else None))  # no parent 7: COMMIT fails
        return n

    group: GroupCommit[int, int] = GroupCommit(db, write)
    assert group.run(1) == 1
    with pytest.raises(sqlite3.IntegrityError):
        group.run(2)
    assert group.run(3) == 3  # the file and the group go on
    assert _rows(tmp_path / "g.db") == [1, 3]
    db.close()


def _record() -> GenerationRecord:
    return build_record(parse_create_request(create_body()), load_catalog(), project="alpha", max_attempts=2)


@pytest.mark.parametrize("group_commit", [False, True], ids=["each-its-own", "grouped"])
def test_concurrent_creates_keep_their_idempotency(tmp_path: Path, group_commit: bool) -> None:
    """The same answers whether the creates share transactions (``queue.sqlite_group_commit``) or not."""
    queue = SqliteQueue(tmp_path / "q.db", group_commit=group_commit)
    try:
        same_key = _together(8, lambda i: queue.enqueue(_record(), idempotency_key="k", request_hash="h"))
        assert len({r.record.id for r in same_key}) == 1
        assert sorted(r.replayed for r in same_key) == [False] + [True] * 7
        conflicts = _together(4, lambda i: queue.enqueue(_record(), idempotency_key="k", request_hash=f"other-{i}"))
        assert all(isinstance(c, IdempotencyConflict) for c in conflicts)
        distinct = _together(8, lambda i: queue.enqueue(_record(), idempotency_key=f"k{i}", request_hash="h"))
        assert len({r.record.id for r in distinct}) == 8 and not any(r.replayed for r in distinct)
        positions = sorted(queue.position(r.record.id) for r in distinct)
        assert positions == list(range(1, 9))  # behind the first key's job, each in its own place
    finally:
        queue.close()


def test_the_apis_creates_go_to_the_file_in_batches_each_with_its_answer(tmp_path: Path) -> None:
    """``OffloadedQueue`` over SQLite with ``queue.sqlite_group_commit``: creates that arrive together take
    one hand-off to a thread and one transaction; each caller gets its own answer (a replay, a conflict,
    its queue position)."""
    queue = SqliteQueue(tmp_path / "q.db", group_commit=True)
    batches: list[int] = []

    def enqueue_many(creates: list[Any]) -> list[Any]:
        batches.append(len(creates))
        return queue.enqueue_many(creates)

    async def run() -> list[Any]:
        aqueue = OffloadedQueue(queue, reads_inline=True, enqueue_many=enqueue_many)
        try:
            calls = [aqueue.enqueue(_record(), idempotency_key=f"k{i}", request_hash="h") for i in range(16)]
            calls += [aqueue.enqueue(_record(), idempotency_key="k0", request_hash="h")]  # replays k0
            calls += [aqueue.enqueue(_record(), idempotency_key="k1", request_hash="other")]  # conflicts
            answers = await asyncio.gather(*calls, return_exceptions=True)
            answers.append(await aqueue.enqueue(_record()))  # alone: a batch of one
            return answers
        finally:
            await aqueue.aclose()

    try:
        answers = asyncio.run(run())
        assert batches == [18, 1]
        created, replay, conflict, alone = answers[:16], answers[16], answers[17], answers[18]
        assert [a.position for a in created] == list(range(16)) and not any(a.replayed for a in created)
        assert replay.replayed and replay.record.id == created[0].record.id and replay.position == 0
        assert isinstance(conflict, IdempotencyConflict) and conflict.job_id == created[1].record.id
        assert alone.position == 16 and queue.get(alone.record.id) == alone.record
    finally:
        queue.close()

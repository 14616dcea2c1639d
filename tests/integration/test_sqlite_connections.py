"""SQLite connections stay bounded while threads come and go.

The embedded API calls the queue and the key store from a threadpool that retires idle threads and
starts new ones; every thread opens its own connection. Bursts of calls, each from fresh threads, on
the real SQLite queue and key store: the open connections return to the baseline after every burst
and the process's file descriptors on those files stay at one level instead of growing by two per
thread. (That level is above the baseline by at most one burst: SQLite's unix layer keeps a closed
connection's database descriptor while another connection of the process holds the file, so as not to
drop its locks, and hands it to the next connection opened on that file.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.api_keys import Scope, SqliteKeyStore
from foundation.core.catalog import load_catalog
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.queue.sqlite.backend import SqliteQueue
from tests.integration.thread_bursts import THREADS_PER_BURST, burst, open_fds_under
from tests.integration.worker_harness import make_record

BURSTS = 6


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[SqliteQueue]:
    q = open_queue(QueueSettings(backend="sqlite", sqlite_path=str(tmp_path / "db" / "queue.db")))
    assert isinstance(q, SqliteQueue)
    yield q
    q.close()


def test_queue_connections_and_fds_stay_flat_over_bursts_of_new_threads(queue: SqliteQueue, tmp_path: Path) -> None:
    record = make_record(load_catalog(), "tiny-wan")
    queue.enqueue(record)

    def poll() -> None:  # what GET /v1/generations/{id} and the list route ask of the queue
        assert queue.get(record.id) is not None
        queue.position(record.id)
        queue.list_jobs(record.project, limit=5)

    poll()  # this thread's connection: the baseline
    db_dir = tmp_path / "db"
    baseline_fds, baseline_conns = open_fds_under(db_dir), queue._db.open_connections()
    assert baseline_fds >= 1 and baseline_conns == 1
    peak_fds = 0

    def poll_and_count() -> None:
        nonlocal peak_fds
        poll()
        peak_fds = max(peak_fds, open_fds_under(db_dir))

    levels = []
    for _ in range(BURSTS):
        burst(poll_and_count)
        assert queue._db.open_connections() == baseline_conns
        levels.append(open_fds_under(db_dir))
    assert levels == [levels[0]] * BURSTS, levels  # flat: nothing accumulates burst over burst
    assert levels[0] <= baseline_fds + THREADS_PER_BURST, levels
    # The bursts did open a connection per thread while they ran: what closed them was the thread ending.
    assert peak_fds > baseline_fds + THREADS_PER_BURST, peak_fds


def test_close_closes_every_live_thread_connection_and_later_calls_reopen(queue: SqliteQueue, tmp_path: Path) -> None:
    queue.depth("tiny-wan")
    release, opened = threading.Event(), threading.Barrier(4)

    def hold() -> None:  # a thread that keeps running past ``close``
        queue.depth("tiny-wan")
        opened.wait(timeout=30)
        release.wait(timeout=30)
        queue.depth("tiny-wan")  # after close: a fresh connection, not the closed one

    holders = [threading.Thread(target=hold) for _ in range(3)]
    for t in holders:
        t.start()
    opened.wait(timeout=30)
    assert queue._db.open_connections() == 4
    queue._db.close()
    assert queue._db.open_connections() == 0
    assert open_fds_under(tmp_path / "db") == 0
    release.set()
    for t in holders:
        t.join(timeout=30)
    assert queue._db.open_connections() == 0  # the holders' new connections ended with them
    assert queue.depth("tiny-wan") == 0


def test_key_store_fds_stay_flat_over_bursts_of_new_threads(tmp_path: Path) -> None:
    keys = SqliteKeyStore(tmp_path / "keys" / "keys.db")
    try:
        _, token = keys.create("alpha", [Scope.generations_read])

        def authenticate() -> None:  # every authenticated request does this
            assert keys.authenticate(token) is not None

        authenticate()
        baseline = open_fds_under(tmp_path / "keys")
        assert baseline >= 1
        levels = []
        for _ in range(BURSTS):
            burst(authenticate)
            levels.append(open_fds_under(tmp_path / "keys"))
        assert levels == [levels[0]] * BURSTS, levels
        assert levels[0] <= baseline + THREADS_PER_BURST, levels
    finally:
        keys.close()

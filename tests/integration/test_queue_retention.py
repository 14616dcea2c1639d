"""Queue position at O(log n) and retention, on a real redis-server and a real SQLite file.

Position: right in the plain FIFO case and never rising while jobs are claimed (both backends).
Retention: a terminal job's record and events expire after ``queue.record_ttl_days`` (set tiny here
through the setting), and a purge then leaves Redis's memory where it was before the jobs; the SQLite
file stays the same size over repeated bursts; consumers of stopped workers are removed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import redis

from foundation.core.contract import ErrorInfo, Status
from foundation.core.errors import ErrorCode
from foundation.queue import keys
from foundation.queue.base import JobQueue, Outcome
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.queue.sqlite.backend import SqliteQueue
from foundation.queue.sqlite.clock import Clock
from tests.integration import queue_support
from tests.integration.queue_support import new_record

make_queue = queue_support.make_queue
queue = queue_support.queue

DONE = Outcome(status=Status.succeeded)


def _positions(queue: JobQueue, ids: list[str]) -> list[int | None]:
    return [queue.position(i) for i in ids]


def test_positions_are_exact_in_fifo_and_fall_as_jobs_are_claimed(queue: JobQueue) -> None:
    ids = [queue.enqueue(new_record()).record.id for _ in range(25)]
    other = queue.enqueue(new_record(model="tiny-ltx2")).record.id  # another model's queue
    assert _positions(queue, ids) == list(range(25)) and queue.position(other) == 0
    waiting = list(ids)
    for round_ in range(20):
        claim = queue.claim("w1", ["tiny-wan"])
        assert claim is not None and claim.job_id == waiting[0]
        waiting.pop(0)
        if round_ % 4 == 0:  # jobs keep arriving behind the backlog
            waiting.append(queue.enqueue(new_record()).record.id)
        assert _positions(queue, waiting) == list(range(len(waiting)))
        assert queue.position(claim.job_id) is None and queue.depth("tiny-wan") == len(waiting)
        assert queue.finish(claim, DONE)
    assert queue.position(other) == 0


def test_positions_never_rise_and_stay_close_with_cancels_and_retries(queue: JobQueue) -> None:
    """Cancels and re-queues make the figure approximate (docs/queue-protocol.md): it may read one lower
    per job canceled behind it, never higher than the truth, and it never rises while a job waits."""
    ids = [queue.enqueue(new_record()).record.id for _ in range(12)]
    last = dict.fromkeys(ids, 10**9)
    truth = list(ids)
    steps = ["cancel:3", "claim", "cancel:0", "requeue", "claim", "cancel:5", "claim", "claim"]
    for step in steps:
        if step.startswith("cancel:"):
            victim = truth.pop(int(step.split(":")[1]))
            queue.cancel(victim)
            last.pop(victim)
        else:
            claim = queue.claim("w1", ["tiny-wan"])
            assert claim is not None and claim.job_id == truth.pop(0)
            last.pop(claim.job_id)
            if step == "requeue":  # released: back at the end of the queue
                assert queue.release(claim)
                truth.append(claim.job_id)
                last[claim.job_id] = 10**9
            else:
                assert queue.finish(claim, DONE)
        for place, job_id in enumerate(truth):
            pos = queue.position(job_id)
            assert pos is not None and place - 3 <= pos <= place, (step, job_id, pos, place)
            assert pos <= last[job_id], (step, job_id, pos, last[job_id])
            last[job_id] = pos


# ------------------------------------------------------------------------------------ Redis retention
TTL_S = 2.0  # a stall between a finish and the check of its TTL must stay below it


def _tiny_ttl_queue(redis_url: str, **settings: object) -> JobQueue:
    return open_queue(QueueSettings(backend="redis", redis_url=redis_url, record_ttl_days=TTL_S / 86400, **settings))


def _run_jobs(queue: JobQueue, n: int, *, project: str = "proj-a") -> list[str]:
    ids = []
    for i in range(n):
        record = queue.enqueue(new_record(project=project), idempotency_key=f"k-{i}", request_hash="h").record
        claim = queue.claim("w1", ["tiny-wan"])
        assert claim is not None and queue.finish(claim, DONE)
        ids.append(record.id)
    return ids


def _used_memory(client: redis.Redis) -> int:
    time.sleep(0.5)  # the server shrinks emptied hash tables in its cron (10 Hz)
    return int(client.info("memory")["used_memory"])


def _wait_gone(client: redis.Redis, names: list[str]) -> None:
    for _ in range(600):  # Redis expires keys in the background: wait, bounded, then fail
        if not client.exists(*names):
            return
        time.sleep(0.05)
    raise AssertionError(f"{client.exists(*names)} keys still there")


def test_redis_terminal_jobs_expire_and_memory_returns_to_baseline(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    queue = _tiny_ttl_queue(redis_url)
    warm_up = _run_jobs(queue, 3)  # the stream, group, consumer and scripts exist before the baseline
    _wait_gone(client, [keys.job_record("tiny-wan", i) for i in warm_up])
    time.sleep(TTL_S)
    queue.purge_expired()
    client.delete(*client.keys("gw:idem:*"))  # kept 24 h by design: not what this test measures
    baseline = _used_memory(client)

    ids = [queue.enqueue(new_record(), idempotency_key=f"k-{i}", request_hash="h").record.id for i in range(500)]
    grown = _used_memory(client) - baseline  # 500 jobs held (queued: no TTL while not terminal)
    assert client.pttl(keys.job_record("tiny-wan", ids[0])) == -1
    for _ in ids:
        claim = queue.claim("w1", ["tiny-wan"])
        assert claim is not None and queue.finish(claim, DONE)
        last = [keys.job_record("tiny-wan", claim.job_id), keys.job_events("tiny-wan", claim.job_id)]
        assert all(0 < client.pttl(name) <= TTL_S * 1000 for name in last)  # set by the finish
    assert 0 < client.ttl(keys.idempotency("proj-a", "k-0")) <= keys.IDEMPOTENCY_TTL_S

    job_keys = [keys.job_record("tiny-wan", i) for i in ids] + [keys.job_events("tiny-wan", i) for i in ids]
    _wait_gone(client, job_keys)
    time.sleep(TTL_S)  # the feed's entries and the listing members are past the TTL as well
    assert queue.purge_expired() >= 2 * 500
    assert not client.exists(*[keys.job_model_index(i) for i in ids])
    assert client.zcard(keys.project_jobs("proj-a")) == 0 and client.xlen(keys.events_stream("tiny-wan")) == 0
    assert queue.get(ids[0]) is None and queue.position(ids[0]) is None
    client.delete(*client.keys("gw:idem:*"))
    residual = _used_memory(client) - baseline
    # Per job: kilobytes while held; once expired and purged, the allocator's and the server's slack
    # of some KB in all (client buffers, hash tables not shrunk yet), not per job.
    assert grown / 500 > 2000, grown
    assert residual / 500 < 0.03 * (grown / 500), (residual, grown)
    queue.close()
    client.close()


def test_redis_consumers_of_stopped_workers_are_removed(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    queue = _tiny_ttl_queue(redis_url, consumer_idle_s=0.2)
    queue.enqueue(new_record())
    holder = queue.claim("busy-worker", ["tiny-wan"])
    assert holder is not None
    for name in ("stopped-1", "stopped-2"):  # workers that ran jobs and stopped
        client.xgroup_createconsumer(keys.job_stream("tiny-wan"), keys.CONSUMER_GROUP, name)
    names = {c["name"] for c in client.xinfo_consumers(keys.job_stream("tiny-wan"), keys.CONSUMER_GROUP)}
    assert {"busy-worker", "stopped-1", "stopped-2"} <= names
    time.sleep(0.3)
    queue.purge_expired()
    names = {c["name"] for c in client.xinfo_consumers(keys.job_stream("tiny-wan"), keys.CONSUMER_GROUP)}
    assert names == {"busy-worker"}  # holds a job: kept however idle
    assert queue.renew(holder) and queue.finish(holder, DONE)
    queue.close()
    client.close()


def test_redis_position_reads_the_xadd_counter_and_survives_an_upgrade(redis_url: str) -> None:
    """``position.lua`` reads the stream's XADD counter (one GET, not ``XINFO STREAM``); a queue written
    before the counter existed (simulated by deleting it) continues from the stream's ``entries-added``,
    so positions of jobs enqueued before and after the upgrade stay exact. Plain FIFO: under fair share
    a backlog waits parked, not in the stream (tests/integration/test_queue_fairness.py)."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    queue = _tiny_ttl_queue(redis_url, fair={"enabled": False})
    _run_jobs(queue, 2)  # entries added and deleted before: the count is not the stream's length
    before = [queue.enqueue(new_record()).record.id for _ in range(3)]
    counter = keys.job_stream_seq("tiny-wan")
    info = client.xinfo_stream(keys.job_stream("tiny-wan"))
    assert int(client.get(counter) or -1) == info["entries-added"] == 5
    client.delete(counter)  # the upgrade: a queue from a version without the counter
    after = [queue.enqueue(new_record()).record.id for _ in range(2)]
    assert int(client.get(counter) or -1) == 7
    assert _positions(queue, before + after) == [0, 1, 2, 3, 4]
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == before[0]
    assert _positions(queue, before[1:] + after) == [0, 1, 2, 3]
    queue.close()
    client.close()


# ------------------------------------------------------------------------------------ SQLite retention
def test_sqlite_file_stays_flat_over_bursts_once_purged(tmp_path: Path) -> None:
    now = [time.time()]
    path = tmp_path / "queue.db"
    queue = SqliteQueue(path, record_ttl_s=3600, clock=Clock(wall=lambda: now[0]))
    sizes = []
    for burst in range(5):
        ids = []
        for i in range(300):
            rec = queue.enqueue(new_record(), idempotency_key=f"b{burst}-{i}", request_hash="h").record
            ids.append(rec.id)
            claim = queue.claim("w1", ["tiny-wan"])
            assert claim is not None and queue.finish(claim, DONE)
        now[0] += 25 * 3600  # past the record TTL and the 24 h of idempotency keys
        assert queue.purge_expired() >= 600
        assert queue.get(ids[0]) is None and queue.events(ids[0]) == []
        sizes.append(os.path.getsize(path))
    assert queue.events() == [] and queue.depth("tiny-wan") == 0
    # Freed pages are reused: each burst fits in the pages the purge freed (without it: 5x the first).
    assert max(sizes) <= 1.1 * sizes[0], sizes
    queue.close()


def test_sqlite_caps_events_and_dead_letters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from foundation.queue.sqlite import backend as sqlite_backend

    monkeypatch.setattr(sqlite_backend, "EVENTS_CAP", 10)
    monkeypatch.setattr(sqlite_backend, "DEAD_LETTERS_CAP", 2)
    queue = SqliteQueue(tmp_path / "queue.db", max_attempts=1)
    kept = queue.enqueue(new_record(model="tiny-ltx2")).record  # queued: its record stays, only old events go
    ids = _run_jobs(queue, 5)
    for _ in range(3):  # out of attempts at once: dead letters
        queue.enqueue(new_record())
        claim = queue.claim("w1", ["tiny-wan"])
        assert claim is not None
        assert queue.retry(claim, ErrorInfo(code=ErrorCode.upload_failed, message="x"), delay_s=0)
    assert len(queue.events(limit=1000)) == 1 + 3 * 5 + 3 * 3 and len(queue.dead_letters()) == 3
    queue.purge_expired()
    events = queue.events(limit=1000)
    assert len(events) == 10 and events[0].job_id == ids[-1]
    assert len(queue.dead_letters()) == 2
    assert queue.get(kept.id) is not None and queue.get(ids[0]) is not None  # within the record TTL
    queue.close()

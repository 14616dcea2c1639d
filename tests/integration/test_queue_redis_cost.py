"""What one job costs a worker on Redis, and that the cheap path keeps every rule of the expensive one.

A claim is one call (``claim.lua`` delivers the entry, reads its job and starts it), also for a worker
woken from its wait (the wait is pipelined with ``claim.lua``, so the server claims as soon as the entry
arrives, without a round trip back to the worker between); a progress write and a finish are one call
each: the holder plans them from the state its own last commit left (``redis_jobs``), and the progress
note travels in the commit. These tests count the calls on a real client and check that a write planned
from a remembered state still yields to every other writer (a cancel flag, a reaper) and is still fenced.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from foundation.core.contract import Stage, Status
from foundation.queue.base import Outcome
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.redis.scripts import Delivery, Idle
from scripts.bench_queue import CountingRedis  # a real client that counts its round trips
from tests.integration.queue_support import new_record

DONE = Outcome(status=Status.succeeded)


def _counting_queue(redis_url: str, **options: Any) -> tuple[RedisQueue, CountingRedis]:
    client = CountingRedis.from_url(redis_url, decode_responses=True)
    assert isinstance(client, CountingRedis)
    return RedisQueue(client, **options), client


def test_each_step_of_a_job_costs_its_worker_one_round_trip(redis_url: str) -> None:
    api = RedisQueue(redis_url)
    worker, client = _counting_queue(redis_url)
    api.enqueue(new_record())
    warm = worker.claim("w1", ["tiny-wan"])  # scripts, group and the first reclaim pass are not per job
    assert warm is not None and worker.finish(warm, DONE)
    record = api.enqueue(new_record()).record

    client.sent = 0
    claim = worker.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == record.id
    assert client.sent == 1  # claim.lua delivered and started it
    client.sent = 0
    assert worker.write_progress(claim, Stage.denoising, 0.0, passed=[Stage.loading]).accepted
    assert client.sent == 1  # the fenced commit, both notes in it
    client.sent = 0
    assert worker.progress(claim, Stage.denoising, 0.5)
    assert client.sent == 1  # the fenced commit, the progress note in it
    client.sent = 0
    assert not worker.cancel_requested(record.id)
    assert client.sent == 1  # the model is known from the claim: no index read
    client.sent = 0
    assert worker.finish(claim, DONE)
    assert client.sent == 1

    done = api.get(record.id)
    assert done is not None and done.status is Status.succeeded and done.attempt == 1
    assert [e.status for e in api.events(record.id)] == [Status.queued, Status.running, Status.succeeded]
    notes = api.progress_notes(record.id)
    assert [(n.attempt, n.stage, n.progress) for n in notes] == [
        (1, Stage.loading, 0.0),
        (1, Stage.denoising, 0.0),
        (1, Stage.denoising, 0.5),
    ]


def test_a_write_planned_from_the_remembered_state_yields_to_a_cancel_flag(redis_url: str) -> None:
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url)
    record = api.enqueue(new_record()).record
    claim = worker.claim("w1", ["tiny-wan"])
    assert claim is not None
    assert worker.progress(claim, Stage.denoising, 0.25)
    api.cancel(record.id)  # moves rev: the worker's remembered state is now stale
    assert worker.progress(claim, Stage.denoising, 0.5)
    running = api.get(record.id)
    assert running is not None and running.cancel_requested and running.progress == 0.5
    assert worker.cancel_requested(record.id)
    assert worker.finish(claim, Outcome(status=Status.canceled))
    ended = api.get(record.id)
    assert ended is not None and ended.status is Status.canceled and ended.cancel_requested


def test_a_remembered_state_never_lets_a_stale_claim_write(redis_url: str) -> None:
    """The first holder's lease lapses and the job goes to a second worker: every write of the first
    (planned from what it remembers) is refused, and leaves no progress note."""
    first, reaper, second = (RedisQueue(redis_url, lease_ttl_s=0.2) for _ in range(3))
    record = first.enqueue(new_record()).record
    old = first.claim("w1", ["tiny-wan"])
    assert old is not None and first.progress(old, Stage.loading, 0.0)
    time.sleep(0.4)
    assert reaper.reclaim_expired() == 1
    new = second.claim("w2", ["tiny-wan"])
    assert new is not None and new.attempt == 2
    assert not first.progress(old, Stage.denoising, 0.9)
    assert not first.finish(old, DONE)
    assert second.progress(new, Stage.denoising, 0.1)
    stored = second.get(record.id)
    assert stored is not None and (stored.status, stored.attempt, stored.progress) == (Status.running, 2, 0.1)
    notes = [(n.attempt, n.stage.value, n.progress) for n in second.progress_notes(record.id)]
    assert notes == [(1, "loading", 0.0), (2, "denoising", 0.1)]
    assert second.finish(new, DONE)


def test_an_idle_worker_of_several_models_claims_from_the_stream_that_woke_it(redis_url: str) -> None:
    api = RedisQueue(redis_url)
    worker, client = _counting_queue(redis_url, block_slice_s=10)  # one blocking read covers the wait
    assert worker.claim("w1", ["tiny-wan", "tiny-ltx2"]) is None  # groups made, first reclaim pass done
    record = new_record(model="tiny-ltx2")
    timer = threading.Timer(0.3, lambda: api.enqueue(record))
    timer.start()
    client.sent = 0
    claim = worker.claim("w1", ["tiny-wan", "tiny-ltx2"], block_s=5)
    timer.join()
    assert claim is not None and claim.job_id == record.id and claim.model == "tiny-ltx2"
    # the scan of both models (one pipeline) + claim.lua of both (nothing yet) + the wait pipelined with
    # claim.lua of both, which answered with the started job once the enqueue woke it
    assert client.sent == 3


def test_a_blocked_worker_woken_by_a_job_gets_it_started_in_the_same_round_trip(redis_url: str) -> None:
    api = RedisQueue(redis_url)
    worker, client = _counting_queue(redis_url, block_slice_s=5)  # one wait covers the test
    api.enqueue(new_record())
    warm = worker.claim("w1", ["tiny-wan"])
    assert warm is not None and worker.finish(warm, DONE)

    claimed: list[Any] = []
    client.sent = 0
    waiting = threading.Thread(target=lambda: claimed.append(worker.claim("w1", ["tiny-wan"], block_s=10)))
    waiting.start()
    time.sleep(0.3)  # the worker is blocked in its wait (claim.lua found nothing, then XREAD BLOCK)
    assert client.sent == 2  # claim.lua (nothing new) + the pipelined wait and claim, still waiting
    record = api.enqueue(new_record()).record
    waiting.join(timeout=5)
    assert claimed and claimed[0] is not None and claimed[0].job_id == record.id
    assert client.sent == 2  # the wait's pipeline answered with the job, started
    running = api.get(record.id)
    assert running is not None and running.status is Status.running and running.attempt == 1


def test_a_wait_times_out_empty_and_a_wait_past_a_lost_script_cache_still_delivers(redis_url: str) -> None:
    api, worker = RedisQueue(redis_url), RedisQueue(redis_url, block_slice_s=0.05)
    started = time.monotonic()
    assert worker.claim("w1", ["tiny-wan"], block_s=0.2) is None
    assert 0.2 <= time.monotonic() - started < 2  # waited its time in slices, then gave up

    first = api.enqueue(new_record()).record
    claim = worker.claim("w1", ["tiny-wan"], block_s=1)
    assert claim is not None and claim.job_id == first.id
    idle = worker._scripts.claim(["tiny-wan"], "w1")
    assert isinstance(idle, Idle)  # nothing new: the cursor is the group's last-delivered id
    assert idle.cursors == {"tiny-wan": claim.token.split("|")[0]}
    worker._r.script_flush()  # a restart or a promoted replica: the pipelined EVALSHA answers NOSCRIPT
    other = api.enqueue(new_record()).record
    delivery = worker._scripts.claim(["tiny-wan"], "w1", wake_from=idle, block_ms=1000)  # no lease: no start
    assert isinstance(delivery, Delivery) and other.id in delivery.fields["payload"]
    assert delivery.record is not None and other.id in delivery.record

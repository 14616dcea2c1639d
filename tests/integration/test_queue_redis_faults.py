"""Redis-only faults a fleet meets: a commit the client re-sends after losing its reply, records with
no lease left (found by the sweep), and the holder's own lease length (real redis-server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from foundation.core.contract import Stage, Status
from foundation.queue import keys, records
from foundation.queue.base import Claim, Outcome
from foundation.queue.redis import plans as redis_plans
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.redis.jobs import JobWriter
from foundation.queue.redis.scripts import Scripts
from tests.integration import queue_support
from tests.integration.queue_support import new_record

MODEL = "tiny-wan"
raw = queue_support.raw  # a plain client of the test's Redis


@pytest.fixture
def queue(redis_url: str) -> Iterator[RedisQueue]:
    q = RedisQueue(redis_url, lease_ttl_s=30)
    yield q
    q.close()


def _deliver(raw: redis.Redis, worker_id: str) -> tuple[str, dict[str, str]]:
    """``XREADGROUP`` one entry as the claim path does before its start commit."""
    reply = raw.xreadgroup(keys.CONSUMER_GROUP, worker_id, {keys.job_stream(MODEL): ">"}, count=1)
    entry_id, fields = reply[0][1][0]  # type: ignore[index]
    return str(entry_id), dict(fields)


def _pending(raw: redis.Redis) -> list[tuple[str, str]]:
    rows = raw.xpending_range(keys.job_stream(MODEL), keys.CONSUMER_GROUP, "-", "+", 10)
    return [(r["message_id"], r["consumer"]) for r in rows]


def test_a_re_sent_claim_commit_is_applied_once_and_the_job_stays_held(queue: RedisQueue, raw: redis.Redis) -> None:
    record = queue.enqueue(new_record()).record
    entry_id, _ = _deliver(raw, "w1")
    jobs = JobWriter(raw, Scripts(raw, events_maxlen=1000))
    snap = jobs.snapshot(MODEL, record.id)
    assert snap is not None
    started = records.started(snap.record)
    plan = redis_plans.start(snap, started, "w1")
    first, again = Scripts(raw, 1000).commit(plan), Scripts(raw, 1000).commit(plan)  # the same plan, sent twice
    assert (first.kind, again.kind) == ("ok", "applied") and first.entry == again.entry == entry_id
    claim = Claim(record.id, MODEL, started.attempt, started, token=f"{entry_id}|w1")
    running = queue.get(record.id)
    assert running is not None and running.status is Status.running and running.attempt == 1
    assert _pending(raw) == [(entry_id, "w1")] and raw.xlen(keys.job_stream(MODEL)) == 1  # held and leased
    assert queue.renew(claim) and queue.progress(claim, Stage.denoising, 0.5)
    assert queue.reclaim_expired() == 0
    assert queue.finish(claim, Outcome(status=Status.succeeded))
    done = queue.get(record.id)
    assert done is not None and done.status is Status.succeeded and done.attempt == 1
    assert [e.status for e in queue.events(record.id)] == [Status.queued, Status.running, Status.succeeded]
    assert _pending(raw) == [] and raw.xlen(keys.job_stream(MODEL)) == 0


def test_a_re_sent_finish_commit_answers_applied(queue: RedisQueue, raw: redis.Redis) -> None:
    record = queue.enqueue(new_record()).record
    claim = queue.claim("w1", [MODEL])
    assert claim is not None
    scripts = Scripts(raw, events_maxlen=1000)
    snap = JobWriter(raw, scripts).snapshot(MODEL, record.id)
    assert snap is not None
    plan = redis_plans.finish(snap, claim, Outcome(status=Status.succeeded))
    assert [scripts.commit(plan).kind, scripts.commit(plan).kind] == ["ok", "applied"]
    done = queue.get(record.id)
    assert done is not None and done.status is Status.succeeded
    assert [e.status for e in queue.events(record.id)] == [Status.queued, Status.running, Status.succeeded]
    assert _pending(raw) == [] and raw.xlen(keys.job_stream(MODEL)) == 0
    assert not queue.finish(claim, Outcome(status=Status.failed))  # the attempt is over


def test_the_claim_path_keeps_an_entry_its_running_record_points_at(queue: RedisQueue, raw: redis.Redis) -> None:
    """The start applied, its reply was lost, and a cancel flag moved ``rev`` before the re-send: the
    claim path sees its own running job on the entry and resumes it instead of dropping the entry."""
    record = queue.enqueue(new_record()).record
    entry_id, fields = _deliver(raw, "w1")
    scripts = Scripts(raw, events_maxlen=1000)
    snap = JobWriter(raw, scripts).snapshot(MODEL, record.id)
    assert snap is not None
    assert scripts.commit(redis_plans.start(snap, records.started(snap.record), "w1")).kind == "ok"
    queue.cancel(record.id)  # another writer: the re-sent start would now be a conflict
    claim = queue._start("w1", MODEL, entry_id, fields)
    assert claim is not None and claim.attempt == 1 and claim.token == f"{entry_id}|w1"
    assert _pending(raw) == [(entry_id, "w1")] and raw.xlen(keys.job_stream(MODEL)) == 1
    assert queue._start("w2", MODEL, entry_id, fields) is None  # not w2's: left alone, not dropped
    assert _pending(raw) == [(entry_id, "w1")]
    assert queue.finish(claim, Outcome(status=Status.canceled))
    assert queue.get(record.id).status is Status.canceled  # type: ignore[union-attr]

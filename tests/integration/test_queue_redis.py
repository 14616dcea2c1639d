"""Redis-only parts of the queue: the Lua lifecycle table and clock text, hash slots, unreadable stream entries, and
a Redis restart (AOF, ``appendfsync always``) in the middle of a backlog."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from pydantic import TypeAdapter
from redis.crc import key_slot

from foundation.core.contract import ErrorInfo, Status, check_transition
from foundation.core.errors import ErrorCode, IllegalTransition
from foundation.queue import keys
from foundation.queue.base import Outcome
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.redis.scripts import lua_source
from tests.fixtures.redis_server import RedisServer
from tests.integration.queue_support import new_record


def test_lua_lifecycle_table_matches_check_transition(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    # The very text commit.lua is built with, plus one line asking it.
    probe = lua_source("transitions") + "\nreturn allowed(ARGV[1], ARGV[2]) and 1 or 0"
    assert lua_source("transitions") in lua_source("commit")
    script = client.register_script(probe)
    for current, new in itertools.product(Status, Status):
        try:
            check_transition(current, new)
            python_says = True
        except IllegalTransition:
            python_says = False
        assert bool(script(keys=[], args=[current.value, new.value])) is python_says, (current, new)
    client.close()


def test_lua_clock_text_matches_python(redis_url: str) -> None:
    """claim.lua writes a started record's times itself: ``isotime`` must write what pydantic (record
    JSON) and ``datetime.isoformat`` (events) write, over leap days, month and year ends, whole seconds."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert lua_source("isotime") in lua_source("claim")
    probe = client.register_script(
        lua_source("isotime") + "\nlocal s, u = tonumber(ARGV[1]), tonumber(ARGV[2])"
        "\nreturn {isotime(s, u, true), isotime(s, u, false)}"
    )
    pydantic_text = TypeAdapter(datetime)
    moments = [(0, 0), (951_782_400, 0), (951_868_799, 999_999), (1_709_164_800, 5), (4_102_444_799, 1)]
    moments += [(s, u) for s in range(1_767_139_200, 1_767_398_400, 86_399) for u in (0, 7, 999_999)]
    rng = random.Random(17)
    moments += [(rng.randrange(0, 4_102_444_800), rng.choice([0, rng.randrange(1_000_000)])) for _ in range(500)]
    for sec, usec in moments:
        moment = datetime.fromtimestamp(sec, UTC).replace(microsecond=usec)
        expected = [pydantic_text.dump_json(moment).decode().strip('"'), moment.isoformat()]
        assert probe(keys=[], args=[sec, usec]) == expected, (sec, usec)
    client.close()


def test_every_atomic_step_stays_in_one_hash_slot() -> None:
    for model in ["tiny-wan", "wan2.1-t2v-14b", "ltx-2"]:
        job = "gen_0123456789abcdef"
        slot_keys = [
            keys.job_record(model, job),
            keys.job_record_prefix(model) + job,  # the job hash as claim.lua names it
            keys.job_events(model, job),
            keys.job_progress(model, job),
            keys.job_stream_seq(model),
            keys.job_stream(model),
            keys.delayed_zset(model),
            keys.events_stream(model),
            keys.dead_stream(model),
            keys.running_set(model),
            keys.claims(model),
        ]
        assert len({key_slot(k.encode()) for k in slot_keys}) == 1, model
    assert key_slot(keys.job_stream("tiny-wan").encode()) != key_slot(keys.job_stream("tiny-ltx2").encode())


def test_unreadable_entries_are_dead_lettered_and_acknowledged(redis_url: str) -> None:
    q = RedisQueue(redis_url, lease_ttl_s=30)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = keys.job_stream("tiny-wan")
    q.enqueue(new_record())  # creates the stream and group; claimed at the end
    first = q.claim("w0", ["tiny-wan"])
    assert first is not None and q.finish(first, Outcome(status=Status.succeeded))
    bad: list[dict[Any, Any]] = [
        {"payload": "{not json"},
        {"payload": json.dumps({"v": 1, "model": "tiny-wan"})},  # wrong schema: no job_id
        {"payload": json.dumps({"v": 1, "job_id": "gen_x", "model": "tiny-wan", "extra": 1})},
        {"payload": json.dumps({"v": 1, "job_id": "gen_x", "model": "no-such-model"})},
        {"payload": json.dumps({"v": 1, "job_id": "gen_never_stored", "model": "tiny-wan"})},
        {"job": "gen_x"},  # unknown field, no payload
    ]
    for fields in bad:
        raw.xadd(stream, fields)
    good = q.enqueue(new_record()).record
    claim = q.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == good.id
    dead = q.dead_letters()
    assert all(d.entry and d.raw and d.model == "tiny-wan" for d in dead)
    reasons = [d.reason for d in dead]
    assert len(reasons) == 6
    assert "payload not JSON" in reasons[0]
    assert "wrong schema" in reasons[1] and "job_id" in reasons[1]
    assert "wrong schema" in reasons[2] and "extra" in reasons[2]
    assert "not this stream's" in reasons[3]
    assert reasons[4] == "no record for this job"
    assert "unknown entry fields" in reasons[5]
    # Every bad entry was acknowledged and deleted: only the claimed job's entry is left, pending.
    assert raw.xlen(stream) == 1 and raw.xpending(stream, keys.CONSUMER_GROUP)["pending"] == 1
    assert q.depth("tiny-wan") == 0
    raw.close()
    q.close()


def test_a_retry_is_due_on_the_servers_clock_not_the_workers(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose wall clock runs an hour ahead (``time.time`` of this process; the server's clock is
    untouched) retries a job with a 0.5 s backoff: the job is due 0.5 s later by Redis ``TIME``, the clock
    the claim path compares due times with, not an hour later."""
    q = RedisQueue(redis_url, lease_ttl_s=30)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    job = q.enqueue(new_record()).record
    claim = q.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == job.id
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600.0)

    def server_ms() -> int:
        sec, usec = raw.time()
        return int(sec) * 1000 + int(usec) // 1000

    before = server_ms()
    assert q.retry(claim, ErrorInfo(code=ErrorCode.upload_failed, message="store down"), delay_s=0.5)
    after = server_ms()
    due = raw.zscore(keys.delayed_zset("tiny-wan"), job.id)
    assert due is not None and before + 500 <= due <= after + 500, (due - before, after - before)
    again = q.claim("w1", ["tiny-wan"], block_s=10.0)  # promoted once due by the server's clock
    assert again is not None and again.job_id == job.id and again.attempt == 2
    raw.close()
    q.close()


def test_a_newer_versions_due_retry_is_promoted_and_left(redis_url: str) -> None:
    """A retry a newer version parked in the delayed zset becomes due: this version promotes it (the claim
    path must, or it would answer "due" for ever) without reading it, and leaves the new entry pending."""
    q = RedisQueue(redis_url, lease_ttl_s=30)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    job = q.enqueue(new_record()).record
    first = q.claim("newer-worker", ["tiny-wan"])
    assert first is not None
    assert q.retry(first, ErrorInfo(code=ErrorCode.upload_failed, message="store down"), delay_s=0.05)
    job_hash = keys.job_record("tiny-wan", job.id)
    raw.hset(job_hash, "format", 2)  # what the newer version wrote it in
    assert q.claim("old-worker", ["tiny-wan"], block_s=1.0) is None  # promoted when due, then left
    assert raw.zscore(keys.delayed_zset("tiny-wan"), job.id) is None
    entry = raw.hget(job_hash, "entry")
    pending = raw.xpending_range(keys.job_stream("tiny-wan"), keys.CONSUMER_GROUP, "-", "+", 10)
    assert entry and [(p["message_id"], p["consumer"]) for p in pending] == [(entry, "old-worker")]
    assert raw.hmget(job_hash, "status", "attempt") == ["queued", "1"]  # not started again: no attempt used
    assert [m.job_id for m in q.newer_records()] == [job.id]
    raw.close()
    q.close()


def test_backlog_survives_a_redis_kill_with_aof(redis_factory: Callable[..., RedisServer]) -> None:
    server = redis_factory("--appendonly", "yes", "--appendfsync", "always")
    q = RedisQueue(server.url, lease_ttl_s=0.5)
    ids = [q.enqueue(new_record()).record.id for _ in range(30)]
    for _ in range(5):  # some done, some running when Redis dies
        claim = q.claim("w1", ["tiny-wan"])
        assert claim is not None and q.finish(claim, Outcome(status=Status.succeeded))
    running = [q.claim("w1", ["tiny-wan"]) for _ in range(3)]
    assert all(c is not None for c in running)
    server.kill()  # SIGKILL: only the AOF remains
    server.start()
    q.close()
    q = RedisQueue(server.url, lease_ttl_s=0.5)
    finished = 0
    while (claim := q.claim("w2", ["tiny-wan"], block_s=2)) is not None:
        assert q.finish(claim, Outcome(status=Status.succeeded))
        finished += 1
    records = [q.get(i) for i in ids]
    assert all(r is not None and r.status is Status.succeeded for r in records)
    assert finished == 25  # 22 never claimed + 3 whose worker lost Redis mid-job, each once
    for i in ids:
        assert [e.status for e in q.events(i)].count(Status.succeeded) == 1
    q.close()


def test_a_blocked_claim_wakes_for_a_job_of_any_hosted_model(redis_url: str) -> None:
    """A worker hosting two models blocks on both streams at once: a new job of either wakes it.

    The block slice is 5 s here, so a claim that blocked on one model's stream alone (the rotation
    this replaced) would leave the other model's job waiting up to 5 s; the bound below is 2 s.
    """
    q = RedisQueue(redis_url, lease_ttl_s=30, block_slice_s=5.0)
    models = ["tiny-wan", "tiny-ltx2"]
    q.claim("w0", models)  # creates both streams and groups
    for model in models * 2:
        result: list[Any] = []
        claimer = threading.Thread(target=lambda out=result: out.append(q.claim("w0", models, block_s=20.0)))
        claimer.start()
        time.sleep(0.3)  # the claim is blocked now
        record = new_record(model=model)
        q.enqueue(record)
        enqueued = time.monotonic()
        claimer.join(timeout=20)
        waited = time.monotonic() - enqueued
        assert result and result[0] is not None and result[0].job_id == record.id, (model, result)
        assert waited < 2.0, f"a {model} job waited {waited:.2f} s for a blocked claim"
        assert q.finish(result[0], Outcome(status=Status.succeeded))
    q.close()

"""``redis_async`` against the sync backend it mirrors, on a real redis-server: the same ``commit.lua``
call for a plan, and the same job in Redis whichever path created it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis

from api.create import build_record
from tests.e2e.conftest import create_body
from worker.core.catalog import load_catalog
from worker.core.contract import GenerationRecord, parse_create_request
from worker.queue import keys, redis_plans
from worker.queue.config import QueueSettings
from worker.queue.redis_async import AsyncRedisQueue
from worker.queue.redis_backend import RedisQueue
from worker.queue.redis_scripts import Scripts, commit_call


def _record(seed: int = 1) -> GenerationRecord:
    request = parse_create_request(create_body(seed=seed))
    return build_record(request, load_catalog(), project="alpha", max_attempts=2)


class _Recorder:
    """Stands in for a client: every registered script records the KEYS and ARGV it is called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []

    def register_script(self, source: str) -> Any:
        def run(keys: list[str], args: list[str]) -> list[str]:
            self.calls.append((keys, args))
            return ["ok", "1-0", "1-0"]

        return run


def _without_clock(args: list[str]) -> list[Any]:
    spec = json.loads(args[0])
    spec.pop("at")  # the commit's own timestamp
    return [spec, *args[1:]]


def test_commit_call_lays_out_commit_lua_as_scripts_does() -> None:
    recorder = _Recorder()
    scripts = Scripts(recorder, events_maxlen=1234, record_ttl_ms=5678)
    plan = redis_plans.create(_record())
    scripts.commit(plan)
    [(sync_keys, sync_args)] = recorder.calls
    async_keys, async_args = commit_call(plan, events_maxlen=1234, record_ttl_ms=5678)
    assert async_keys == sync_keys
    assert _without_clock(async_args) == _without_clock(sync_args)


def test_a_job_is_stored_alike_by_both_paths(redis_url: str) -> None:
    sync = RedisQueue(redis_url, max_attempts=2)
    client = redis.Redis.from_url(redis_url, decode_responses=True)

    async def create() -> tuple[str, int | None, int | None]:
        fast = AsyncRedisQueue.open(QueueSettings(backend="redis", redis_url=redis_url, max_attempts=2))
        assert fast is not None
        try:
            created = await fast.enqueue(_record(2), idempotency_key="k", request_hash="h")
            replay = await fast.enqueue(_record(3), idempotency_key="k", request_hash="h")
            assert replay.replayed and replay.record.id == created.record.id
            polled = await fast.poll(created.record.id)
            assert polled is not None and polled.record == sync.get(created.record.id)
            return created.record.id, created.position, polled.position
        finally:
            await fast.aclose()

    try:
        by_sync = sync.enqueue(_record(1)).record.id
        by_async, position_at_create, position_polled = asyncio.run(create())
        assert (position_at_create, position_polled) == (1, 1)
        assert sync.position(by_async) == 1
        stored = [client.hgetall(keys.job_record("tiny-wan", j)) for j in (by_sync, by_async)]
        assert set(stored[0]) == set(stored[1])
        for field in ("status", "attempt", "rev", "seq"):
            assert field in stored[0]
        assert [client.get(keys.job_model_index(j)) for j in (by_sync, by_async)] == ["tiny-wan"] * 2
        assert client.zscore(keys.project_jobs("alpha"), by_async) is not None
        claim = sync.claim("w1", ["tiny-wan"])
        claim2 = sync.claim("w1", ["tiny-wan"])
        assert claim is not None and claim2 is not None
        assert [claim.job_id, claim2.job_id] == [by_sync, by_async]  # one FIFO stream, both entries in it
    finally:
        client.close()
        sync.close()

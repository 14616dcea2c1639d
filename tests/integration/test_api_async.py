"""``redis_async`` against the sync backend it mirrors, on a real redis-server: the same ``commit.lua``
call for a plan, and the same job in Redis whichever path created it; a poll that carries the rate
limiter's hit decides as the limiter alone."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from api.api_keys import Scope, SqliteKeyStore
from api.auth import Authenticator, Principal
from api.create import build_record
from api.errors import ApiError
from api.limits import RATE_KEY_PREFIX, AsyncRedisLimiter
from foundation.core.catalog import load_catalog
from foundation.core.contract import GenerationRecord, parse_create_request
from foundation.queue import keys
from foundation.queue.base import Polled
from foundation.queue.config import QueueSettings
from foundation.queue.errors import NotDurable
from foundation.queue.factory import open_queue
from foundation.queue.fairness import FairShare
from foundation.queue.redis import plans as redis_plans
from foundation.queue.redis.async_queue import AsyncRedisQueue
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.redis.scripts import Scripts, commit_call
from tests.e2e.conftest import create_body
from tests.fixtures.redis_server import start_redis


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
    # Plain FIFO, so both jobs get a stream entry (under fair share a backlog waits parked instead).
    sync = RedisQueue(redis_url, max_attempts=2, fair=FairShare(enabled=False))
    client = redis.Redis.from_url(redis_url, decode_responses=True)

    async def create() -> tuple[str, int | None, int | None]:
        fast = AsyncRedisQueue.open(QueueSettings(backend="redis", redis_url=redis_url, max_attempts=2), sync)
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


async def _authorize_poll(
    auth: Authenticator, key: str, job_id: str, queue: AsyncRedisQueue
) -> tuple[Principal, Polled | None]:
    """What the poll route does: the key authorized for reading (one hit of its window), then the poll."""
    principal = await auth.authorize(key, Scope.generations_read)
    return principal, await queue.poll(job_id)


def test_an_authorized_poll_counts_its_hit_once_and_refuses_as_the_limiter(redis_url: str, tmp_path: Path) -> None:
    """``Authenticator.authorize`` then a poll, as the poll route makes them, on the asyncio Redis queue and
    limiter: the poll answers with the job, each poll is one hit of the key's window (once, even on a server
    that lost its scripts), the hit past the burst is 429, and a key without the scope is 403."""
    keys_store = SqliteKeyStore(tmp_path / "keys.db")
    _, reader = keys_store.create("alpha", [Scope.generations_read])
    _, writer = keys_store.create("alpha", [Scope.generations_write])
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    sync = RedisQueue(redis_url, max_attempts=2)

    async def run() -> None:
        queue = AsyncRedisQueue.open(QueueSettings(backend="redis", redis_url=redis_url, max_attempts=2), sync)
        assert queue is not None
        limiter = AsyncRedisLimiter(aioredis.Redis.from_url(redis_url, decode_responses=True), rate_per_s=0.1, burst=4)
        auth = Authenticator(keys_store, limiter)
        try:
            job_id = (await queue.enqueue(_record(4))).record.id
            principal, polled = await _authorize_poll(auth, reader, job_id, queue)
            assert principal.project == "alpha" and polled is not None and polled.record.id == job_id
            assert polled.position == 0
            window_key = f"{RATE_KEY_PREFIX}:{limiter.item.key_for(principal.key_id)}"
            assert client.llen(window_key) == 1  # the hits in the window, as the limiter's scripts keep them
            client.script_flush()  # a restarted server: every script lost, the hit counted once
            _, polled = await _authorize_poll(auth, reader, job_id, queue)
            assert polled is not None and polled.position == 0 and client.llen(window_key) == 2
            _, missing = await _authorize_poll(auth, reader, "gen_unknown", queue)
            assert missing is None and client.llen(window_key) == 3  # no such job: the hit still counts
            await _authorize_poll(auth, reader, job_id, queue)
            with pytest.raises(ApiError) as refused:  # 4 hits in the window: the 5th is refused
                await _authorize_poll(auth, reader, job_id, queue)
            assert refused.value.status == 429 and refused.value.headers["RateLimit-Remaining"] == "0"
            with pytest.raises(ApiError) as scope:
                await _authorize_poll(auth, writer, job_id, queue)
            assert scope.value.status == 403
        finally:
            auth.close()
            await limiter.aclose()
            await queue.aclose()

    try:
        asyncio.run(run())
    finally:
        client.close()
        sync.close()
        keys_store.close()


def test_a_durable_create_waits_for_the_replica_and_is_refused_when_it_cannot(tmp_path: Path) -> None:
    """``wait_replicas`` on the asyncio create path: the create returns once the replica holds the job;
    with the replica stopped it is ``NotDurable`` (503), and its replay waits again before answering."""
    primary = start_redis(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_redis(tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port))
    assert replica.proc is not None
    try:
        deadline = time.monotonic() + 15
        while replica.client().info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "replica did not sync"
            time.sleep(0.05)

        async def run() -> str:
            settings = {"backend": "redis", "redis_url": primary.url, "wait_replicas": 1, "max_attempts": 2}
            waiting = open_queue(QueueSettings(**settings, wait_timeout_ms=10_000))
            hurried = open_queue(QueueSettings(**settings, wait_timeout_ms=300))
            assert isinstance(waiting, RedisQueue) and isinstance(hurried, RedisQueue)
            queue = AsyncRedisQueue.open(QueueSettings(**settings, wait_timeout_ms=10_000), waiting)
            stalled = AsyncRedisQueue.open(QueueSettings(**settings, wait_timeout_ms=300), hurried)
            assert queue is not None and stalled is not None
            try:
                created = await queue.enqueue(_record(5), idempotency_key="d1", request_hash="h")
                assert replica.client().hget(keys.job_record("tiny-wan", created.record.id), "record") is not None
                replica.proc.send_signal(signal.SIGSTOP)  # neither applies nor acknowledges
                try:
                    with pytest.raises(NotDurable):
                        await stalled.enqueue(_record(6), idempotency_key="d2", request_hash="h")
                    with pytest.raises(NotDurable):  # the replay must not answer before the replica has it
                        await stalled.enqueue(_record(6), idempotency_key="d2", request_hash="h")
                finally:
                    replica.proc.send_signal(signal.SIGCONT)
                replay = await queue.enqueue(_record(6), idempotency_key="d2", request_hash="h")
                assert replay.replayed
                return replay.record.id
            finally:
                await queue.aclose()
                await stalled.aclose()
                waiting.close()
                hurried.close()

        job_id = asyncio.run(run())
        assert replica.client().hget(keys.job_record("tiny-wan", job_id), "record") is not None
    finally:
        replica.proc.send_signal(signal.SIGCONT)
        replica.stop()
        primary.stop()

"""One rate-limit rule on every backend: the in-process limiter, the Redis one (a real redis-server) and
its asyncio twin give the same decisions and the same ``RateLimit-*`` figures for the same requests.

The window is long (burst / rate = 50 s), so no request in a test leaves it: nothing here depends on
how fast the test runs, only ``RateLimit-Reset`` and ``Retry-After`` are bounded instead of pinned."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from api.limits import AsyncRedisLimiter, MemoryLimiter, RateDecision, RateLimiter, RedisLimiter

RATE_PER_S, BURST = 0.1, 5
WINDOW_S = 50  # burst / rate

Hit = Callable[[str], RateDecision]


@pytest.fixture(params=["memory", "redis", "redis-async"])
def new_limiter(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Callable[[], Hit]]:
    """A factory of limiters of one backend; on Redis every limiter it makes shares the server (replicas)."""
    import redis
    import redis.asyncio as aioredis

    loop = asyncio.new_event_loop()
    closers: list[Callable[[], None]] = []

    def make() -> Hit:
        limiter: RateLimiter
        if request.param == "memory":
            limiter = MemoryLimiter(RATE_PER_S, BURST)
        elif request.param == "redis":
            client = redis.Redis.from_url(redis_url)
            closers.append(client.close)
            limiter = RedisLimiter(client, RATE_PER_S, BURST)
        else:
            limiter = AsyncRedisLimiter(aioredis.Redis.from_url(redis_url), RATE_PER_S, BURST)
        closers.append(lambda: loop.run_until_complete(limiter.aclose()))
        return lambda key_id: loop.run_until_complete(limiter.hit(key_id))

    yield make
    for close in closers:
        close()
    loop.close()


def _shape(decision: RateDecision) -> tuple[bool, int, int]:
    return decision.allowed, decision.limit, decision.remaining


def test_a_burst_then_refusals_with_the_same_figures_on_every_backend(new_limiter: Callable[[], Hit]) -> None:
    hit = new_limiter()
    decisions = [hit("key_a") for _ in range(BURST + 2)]
    assert [_shape(d) for d in decisions] == [
        (True, 5, 4),
        (True, 5, 3),
        (True, 5, 2),
        (True, 5, 1),
        (True, 5, 0),
        (False, 5, 0),
        (False, 5, 0),  # a refused request does not use up a slot
    ]
    for decision in decisions:
        assert 1 <= decision.reset_s <= WINDOW_S
    refused = decisions[-1]
    assert 1 <= refused.retry_after_s <= WINDOW_S
    assert refused.headers() == {
        "RateLimit-Limit": "5",
        "RateLimit-Remaining": "0",
        "RateLimit-Reset": str(refused.reset_s),
        "Retry-After": str(refused.retry_after_s),
    }
    assert "Retry-After" not in decisions[0].headers()


def test_each_key_has_its_own_window(new_limiter: Callable[[], Hit]) -> None:
    hit = new_limiter()
    for _ in range(BURST):
        hit("key_a")
    assert not hit("key_a").allowed
    assert _shape(hit("key_b")) == (True, 5, 4)


def test_two_limiters_on_redis_share_a_window_in_memory_each_their_own(
    new_limiter: Callable[[], Hit], request: pytest.FixtureRequest
) -> None:
    first, second = new_limiter(), new_limiter()
    for _ in range(3):
        first("key_a")
    shared = request.node.callspec.params["new_limiter"] != "memory"
    # Redis: one window for every API replica. Memory: one API process, its own window.
    assert _shape(second("key_a")) == ((True, 5, 1) if shared else (True, 5, 4))


def test_all_backends_decide_alike(redis_url: str) -> None:
    """The same request sequence, every backend side by side: identical decisions."""
    import redis
    import redis.asyncio as aioredis

    client = redis.Redis.from_url(redis_url)
    memory = MemoryLimiter(RATE_PER_S, BURST)
    sync = RedisLimiter(client, RATE_PER_S, BURST)
    keys = ["k1", "k2", "k1", "k1", "k3", "k1", "k1", "k2", "k1", "k1"]

    async def run_async() -> list[tuple[bool, int, int]]:
        limiter = AsyncRedisLimiter(aioredis.Redis.from_url(redis_url), RATE_PER_S, BURST)
        try:
            return [_shape(await limiter.hit(f"async-{k}")) for k in keys]
        finally:
            await limiter.aclose()

    try:
        from_memory = [_shape(asyncio.run(memory.hit(k))) for k in keys]
        from_redis = [_shape(asyncio.run(sync.hit(f"sync-{k}"))) for k in keys]
        from_async = asyncio.run(run_async())
    finally:
        client.close()
    assert from_memory == from_redis == from_async
    assert [allowed for allowed, _, _ in from_memory] == [True] * 8 + [False] * 2

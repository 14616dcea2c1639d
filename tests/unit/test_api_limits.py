"""Per-key rate limits: the in-process and the shared Redis limiter (one moving window, api/limits.py;
tests/integration/test_rate_limit_backends.py checks that both decide alike)."""

from __future__ import annotations

import socket

import pytest

from api.limits import MemoryLimiter, RedisLimiter
from worker.core.errors import BackendUnavailable


def test_memory_limiter_allows_a_burst_then_refuses_with_retry_after() -> None:
    limiter = MemoryLimiter(rate_per_s=0.5, burst=3)
    assert [limiter.hit("k1").allowed for _ in range(3)] == [True, True, True]
    refused = limiter.hit("k1")
    assert not refused.allowed
    # The window is burst / rate = 6 s: the first request's slot frees 6 s after it was taken.
    assert 5 <= refused.retry_after_s <= 6


def test_memory_limiter_is_per_key() -> None:
    limiter = MemoryLimiter(rate_per_s=0.01, burst=1)
    assert limiter.hit("a").allowed
    assert not limiter.hit("a").allowed
    assert limiter.hit("b").allowed


def test_redis_window_is_shared_between_limiters(redis_server) -> None:
    import redis

    client = redis.Redis.from_url(redis_server.url)
    # Two replicas over one Redis share one counter per key.
    a = RedisLimiter(client, rate_per_s=0.01, burst=2)
    b = RedisLimiter(client, rate_per_s=0.01, burst=2)
    assert a.hit("key_shared").allowed
    assert b.hit("key_shared").allowed
    refused = a.hit("key_shared")
    assert not refused.allowed and refused.retry_after_s >= 1
    assert b.hit("key_other").allowed
    client.close()


def test_redis_window_on_an_unreachable_redis_is_backend_unavailable() -> None:
    import redis

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(BackendUnavailable) as info:
        RedisLimiter(client, rate_per_s=1, burst=1).hit("key_a")
    assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)
    client.close()

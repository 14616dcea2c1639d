"""Per-key rate limits: the in-process and the shared Redis limiter (one moving window, api/limits.py;
tests/integration/test_rate_limit_backends.py checks that both decide alike)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from api.limits import MemoryLimiter, RateDecision, RateLimiter, RedisLimiter, rate_limit_headers
from foundation.core.errors import BackendUnavailable


def hit(limiter: RateLimiter, key_id: str) -> RateDecision:
    """One awaited hit, from a test's plain code."""
    return asyncio.run(limiter.hit(key_id))


def test_memory_limiter_allows_a_burst_then_refuses_with_retry_after() -> None:
    limiter = MemoryLimiter(rate_per_s=0.5, burst=3)
    assert [hit(limiter, "k1").allowed for _ in range(3)] == [True, True, True]
    refused = hit(limiter, "k1")
    assert not refused.allowed
    # The window is burst / rate = 6 s: the first request's slot frees 6 s after it was taken.
    assert 5 <= refused.retry_after_s <= 6


def test_memory_limiter_is_per_key() -> None:
    limiter = MemoryLimiter(rate_per_s=0.01, burst=1)
    assert hit(limiter, "a").allowed
    assert not hit(limiter, "a").allowed
    assert hit(limiter, "b").allowed


def test_redis_window_is_shared_between_limiters(redis_server) -> None:
    import redis

    client = redis.Redis.from_url(redis_server.url)
    # Two replicas over one Redis share one counter per key.
    a = RedisLimiter(client, rate_per_s=0.01, burst=2)
    b = RedisLimiter(client, rate_per_s=0.01, burst=2)
    assert hit(a, "key_shared").allowed
    assert hit(b, "key_shared").allowed
    refused = hit(a, "key_shared")
    assert not refused.allowed and refused.retry_after_s >= 1
    assert hit(b, "key_other").allowed
    client.close()


def test_redis_window_on_an_unreachable_redis_is_backend_unavailable() -> None:
    import redis

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(BackendUnavailable) as info:
        hit(RedisLimiter(client, rate_per_s=1, burst=1), "key_a")
    assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)
    client.close()


def test_memory_limiter_window_moves_with_the_clock_and_holds_at_most_burst_times() -> None:
    now = [1000.0]
    limiter = MemoryLimiter(rate_per_s=1.0, burst=3, clock=lambda: now[0])  # 3 in any 3 s
    assert [(d.allowed, d.remaining, d.reset_s) for d in (hit(limiter, "k") for _ in range(3))] == [
        (True, 2, 3),
        (True, 1, 3),
        (True, 0, 3),
    ]
    now[0] += 2.5
    refused = hit(limiter, "k")
    assert (refused.allowed, refused.remaining, refused.retry_after_s) == (False, 0, 1)
    now[0] += 0.5  # the first three hits sit on the window's edge: they still block, no longer count
    edge = hit(limiter, "k")
    assert (edge.allowed, edge.remaining) == (False, 3)
    now[0] += 0.001
    after = hit(limiter, "k")
    assert (after.allowed, after.remaining, after.reset_s) == (True, 2, 3)
    for _ in range(1000):
        now[0] += 10.0
        assert hit(limiter, "k").allowed
    assert len(limiter._hits["k"]) <= 3  # no list that grows with the requests served


def test_memory_limiter_forgets_idle_keys_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    import api.limits

    monkeypatch.setattr(api.limits, "_MEMORY_KEYS_MAX", 10)
    now = [0.0]
    limiter = MemoryLimiter(rate_per_s=1.0, burst=1, clock=lambda: now[0])
    for i in range(10):
        hit(limiter, f"idle-{i}")
    now[0] += 5.0
    hit(limiter, "busy")
    assert set(limiter._hits) == {"busy"}
    assert not hit(limiter, "busy").allowed  # the busy key's window survived the sweep


@pytest.mark.parametrize("allowed", [True, False])
def test_rate_limit_headers_are_the_decisions_headers_less_those_present(allowed: bool) -> None:
    decision = RateDecision(allowed, retry_after_s=7, limit=20, remaining=0 if not allowed else 13, reset_s=4)
    expected = [(k.lower().encode(), v.encode()) for k, v in decision.headers().items()]
    assert rate_limit_headers(decision, []) == expected
    assert len(expected) == (3 if allowed else 4)
    present = [(b"content-type", b"application/json"), (b"RateLimit-Limit", b"20")]
    assert rate_limit_headers(decision, present) == expected[1:]
    assert rate_limit_headers(None, []) == []

"""Retry times after a simulated outage spread out instead of landing at one instant, in the client
(its tenacity loop, driven through ``RetryPolicy``) and in the worker (``verdict.backoff_s``, the delay
handed to ``queue.retry``). Both follow one shape: a capped exponential with equal jitter, every delay
in ``[c/2, c]``. Seeded generators make every run draw the same numbers; nothing sleeps."""

from __future__ import annotations

import asyncio
import random
import statistics

import pytest

from genworker_client.errors import ApiError, TransportFailed
from genworker_client.retry import RetryPolicy
from genworker_client.retry import backoff_s as client_backoff_s
from worker.verdict import backoff_s

FLEET = 200  # clients (or jobs) that failed together in one outage


def _assert_spread(delays: list[float], *, low: float, high: float) -> None:
    """Within ``[low, high]``, not bunched: all distinct, and every quarter of the range holds some."""
    assert len(delays) == FLEET
    assert all(low <= d <= high for d in delays), (min(delays), max(delays), low, high)
    assert len(set(delays)) == FLEET
    width = high - low
    quarters = [sum(low + q * width / 4 <= d < low + (q + 1) * width / 4 for d in delays) for q in range(4)]
    assert min(quarters) >= FLEET // 8, quarters  # uniform would put ~50 in each
    assert statistics.pstdev(delays) > width / 6  # uniform: width / sqrt(12) ~ width / 3.5


def _outage_delays(policy: RetryPolicy, seed: int, failures: int) -> list[float]:
    """One client's sleeps while the service answers 503 ``failures`` times, then 200."""
    sleeps: list[float] = []
    attempts = 0
    for attempt in policy.retrying(rng=random.Random(seed), sleep=sleeps.append):
        with attempt:
            attempts += 1
            if attempts <= failures:
                raise ApiError(503, "unavailable", "store down")
    assert attempts == failures + 1
    return sleeps


def test_client_retries_after_an_outage_spread_over_each_window() -> None:
    policy = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=8.0)
    runs = [_outage_delays(policy, seed, failures=4) for seed in range(FLEET)]
    for retry_index in range(4):
        ceiling = min(policy.cap_s, policy.base_s * 2**retry_index)
        _assert_spread([run[retry_index] for run in runs], low=ceiling / 2, high=ceiling)


def test_client_retry_after_is_a_floor_and_a_late_hint_stops_the_loop() -> None:
    policy = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=8.0, max_retry_after_s=60.0)
    sleeps: list[float] = []
    with pytest.raises(ApiError) as caught:
        for attempt in policy.retrying(rng=random.Random(1), sleep=sleeps.append):
            with attempt:
                hint = 7.0 if attempt.retry_state.attempt_number == 1 else 61.0
                error = ApiError(429, "rate_limited", "slow down", retry_after_s=hint)
                error.attempts = attempt.retry_state.attempt_number
                raise error
    assert sleeps == [7.0]  # waited out the first hint; the second is above max_retry_after_s
    assert caught.value.attempts == 2


def test_client_gives_up_after_max_attempts_with_the_last_error() -> None:
    policy = RetryPolicy(max_attempts=3, base_s=0.5, cap_s=8.0)
    sleeps: list[float] = []
    with pytest.raises(TransportFailed) as caught:
        for attempt in policy.retrying(rng=random.Random(2), sleep=sleeps.append):
            with attempt:
                raise TransportFailed("GET", "http://127.0.0.1:1/v1/models", attempt.retry_state.attempt_number)
    assert caught.value.attempts == 3
    assert len(sleeps) == 2


def test_sync_and_async_loops_draw_the_same_delays() -> None:
    policy = RetryPolicy(max_attempts=4, base_s=0.5, cap_s=8.0)
    sync_sleeps = _outage_delays(policy, seed=5, failures=3)

    async def run() -> list[float]:
        sleeps: list[float] = []

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)

        async for attempt in policy.async_retrying(rng=random.Random(5), sleep=sleep):
            with attempt:
                if attempt.retry_state.attempt_number <= 3:
                    raise ApiError(503, "unavailable", "store down")
        return sleeps

    assert asyncio.run(run()) == sync_sleeps
    assert len(sync_sleeps) == 3


@pytest.mark.parametrize("attempt", [1, 3, 6, 12])
def test_worker_retries_of_jobs_failed_in_one_outage_spread(attempt: int) -> None:
    base_s, cap_s = 2.0, 300.0
    rng = random.Random(attempt)
    delays = [backoff_s(attempt, base_s, cap_s, rng=rng) for _ in range(FLEET)]
    ceiling = min(cap_s, base_s * 2 ** (attempt - 1))
    _assert_spread(delays, low=ceiling / 2, high=ceiling)
    assert max(delays) <= cap_s


def test_worker_and_client_share_one_shape() -> None:
    # Same base, cap and seed: the worker's delay after attempt n is the client's before retry n.
    worker = [backoff_s(n, 2.0, 60.0, rng=random.Random(n)) for n in range(1, 10)]
    client = [client_backoff_s(n - 1, base_s=2.0, cap_s=60.0, rng=random.Random(n)) for n in range(1, 10)]
    assert worker == client

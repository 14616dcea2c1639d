"""Pure rules: poll cadence, retry backoff, Retry-After parsing. No server, no sleeping."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from genworker_client.cadence import PollCadence
from genworker_client.retry import RETRYABLE_STATUSES, RetryPolicy, backoff_s, parse_retry_after

# ---------------------------------------------------------------------------------------------------
# Poll cadence


def test_spec_defaults_first_poll_at_5s_then_10_to_15s() -> None:
    cadence, rng = PollCadence(), random.Random(7)
    assert cadence.delay_s(0, retry_after_s=None, rng=rng) == 5.0
    later = [cadence.delay_s(i, retry_after_s=None, rng=rng) for i in range(1, 500)]
    assert all(10.0 <= d <= 15.0 for d in later)
    # Jitter: the draws spread over the window instead of sitting at one value.
    assert max(later) - min(later) > 4.0
    assert len(set(later)) == len(later)


def test_later_polls_draw_from_the_given_rng() -> None:
    cadence = PollCadence(first_s=0.2, min_s=0.3, max_s=0.45)
    expected_rng = random.Random(42)
    expected = [expected_rng.uniform(0.3, 0.45) for _ in range(5)]
    rng = random.Random(42)
    assert [cadence.delay_s(i, retry_after_s=None, rng=rng) for i in range(1, 6)] == expected


@given(
    poll_index=st.integers(min_value=0, max_value=1000),
    retry_after=st.one_of(st.none(), st.floats(min_value=0.0, max_value=3600.0)),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_retry_after_is_a_floor_never_a_ceiling(poll_index: int, retry_after: float | None, seed: int) -> None:
    cadence = PollCadence(first_s=5.0, min_s=10.0, max_s=15.0)
    own = cadence.delay_s(poll_index, retry_after_s=None, rng=random.Random(seed))
    hinted = cadence.delay_s(poll_index, retry_after_s=retry_after, rng=random.Random(seed))
    assert hinted == (own if retry_after is None else max(own, retry_after))


def test_bad_cadence_is_refused() -> None:
    with pytest.raises(ValueError, match="bad poll cadence"):
        PollCadence(first_s=1.0, min_s=3.0, max_s=2.0)
    with pytest.raises(ValueError, match="bad poll cadence"):
        PollCadence(first_s=-1.0)


# ---------------------------------------------------------------------------------------------------
# Retry backoff


@given(
    retry_index=st.integers(min_value=0, max_value=40),
    base=st.floats(min_value=0.01, max_value=5.0),
    cap=st.floats(min_value=0.01, max_value=60.0),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_backoff_is_equal_jitter_of_a_capped_exponential(retry_index: int, base: float, cap: float, seed: int) -> None:
    ceiling = min(cap, base * 2.0**retry_index)
    delay = backoff_s(retry_index, base_s=base, cap_s=cap, rng=random.Random(seed))
    assert ceiling / 2 <= delay <= ceiling


def test_backoff_doubles_until_the_cap() -> None:
    # With the rng pinned to its top value every delay equals its ceiling: 0.5, 1, 2, 4, 8, 8.
    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    delays = [backoff_s(i, base_s=0.5, cap_s=8.0, rng=Top()) for i in range(6)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


def test_policy_retries_transport_errors_and_retryable_statuses_only() -> None:
    policy, rng = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=8.0), random.Random(1)
    assert policy.delay_s(1, status=None, retry_after_s=None, rng=rng) is not None
    for status in RETRYABLE_STATUSES:
        assert policy.delay_s(1, status=status, retry_after_s=None, rng=rng) is not None
    for status in (400, 401, 403, 404, 409, 413, 422, 501):
        assert policy.delay_s(1, status=status, retry_after_s=None, rng=rng) is None


def test_policy_stops_after_max_attempts() -> None:
    policy, rng = RetryPolicy(max_attempts=3), random.Random(1)
    assert policy.delay_s(2, status=503, retry_after_s=None, rng=rng) is not None
    assert policy.delay_s(3, status=503, retry_after_s=None, rng=rng) is None
    assert policy.delay_s(3, status=None, retry_after_s=None, rng=rng) is None


def test_policy_waits_at_least_retry_after_and_gives_up_on_huge_ones() -> None:
    policy = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=8.0, max_retry_after_s=60.0)
    # First retry backoff is at most 0.5 s, so a 7 s hint decides the delay.
    assert policy.delay_s(1, status=429, retry_after_s=7.0, rng=random.Random(3)) == 7.0
    # A hint below the backoff does not shorten it.
    rng_a, rng_b = random.Random(9), random.Random(9)
    plain = policy.delay_s(4, status=503, retry_after_s=None, rng=rng_a)
    assert policy.delay_s(4, status=503, retry_after_s=0.01, rng=rng_b) == plain
    # Beyond max_retry_after_s the caller hears about it now instead of sleeping for minutes.
    assert policy.delay_s(1, status=429, retry_after_s=61.0, rng=random.Random(3)) is None


# ---------------------------------------------------------------------------------------------------
# Retry-After parsing


def test_parse_retry_after_delta_seconds() -> None:
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after(" 12 ") == 12.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-3") == 0.0


def test_parse_retry_after_http_date() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    later = (now + timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert parse_retry_after(later, now=now) == 30.0
    earlier = (now - timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert parse_retry_after(earlier, now=now) == 0.0


@pytest.mark.parametrize("value", [None, "", "soon", "nan", "inf"])
def test_parse_retry_after_unreadable(value: str | None) -> None:
    assert parse_retry_after(value) is None

"""When to retry a request, and how long to wait first; tenacity runs the loop.

Every request this client sends is safe to repeat: reads are GETs, a create carries the same
Idempotency-Key on every attempt (the server replays the first answer), and a cancel of a canceled
generation changes nothing. So connection errors, 408, 429 and 5xx (except 501) are retried with
exponential backoff and "equal jitter" (half fixed, half random), never sooner than ``Retry-After``.

The rule is :meth:`RetryPolicy.delay_s`, a pure function. :meth:`RetryPolicy.retrying` and
:meth:`RetryPolicy.async_retrying` hand the same rule to tenacity, so the sync and the async client
retry from one definition: the attempt raises (``ApiError`` or ``TransportFailed``, with its
``attempts`` set), tenacity asks the rule whether and how long to wait, and re-raises the last error
unchanged when the rule says stop. The worker's transient-job retry uses the same shape (capped
exponential, equal jitter, tenacity's ``wait_base``) in ``worker/verdict.py``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from tenacity import AsyncRetrying, RetryCallState, Retrying, stop_never
from tenacity.wait import wait_base

from genworker_client.errors import ApiError, TransportFailed

__all__ = ["RETRYABLE_STATUSES", "RetryPolicy", "backoff_s", "parse_retry_after", "wait_equal_jitter"]

RETRYABLE_STATUSES: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504})


def backoff_s(retry_index: int, *, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Delay before retry number ``retry_index`` (0 = first retry): uniform in ``[c/2, c]``, where
    ``c = min(cap_s, base_s * 2**retry_index)``. Half of it is fixed so retries never bunch at zero;
    the other half spreads clients that failed together (one outage) over ``c/2``."""
    try:
        ceiling = min(cap_s, base_s * 2.0**retry_index)
    except OverflowError:
        ceiling = cap_s
    return ceiling / 2.0 + rng.uniform(0.0, ceiling / 2.0)


class wait_equal_jitter(wait_base):  # noqa: N801 - named like tenacity's own wait strategies
    """tenacity wait strategy for :func:`backoff_s`, drawing from ``rng`` (seedable, unlike tenacity's
    built-in random waits, which use the module-level generator)."""

    def __init__(self, *, base_s: float, cap_s: float, rng: random.Random) -> None:
        self.base_s, self.cap_s, self.rng = base_s, cap_s, rng

    def __call__(self, retry_state: RetryCallState) -> float:
        return backoff_s(retry_state.attempt_number - 1, base_s=self.base_s, cap_s=self.cap_s, rng=self.rng)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP-date); ``None`` when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first try. A ``Retry-After`` above ``max_retry_after_s`` is not
    waited out: the error is raised at once, so a caller is never parked for minutes without knowing."""

    max_attempts: int = 5
    base_s: float = 0.5
    cap_s: float = 8.0
    max_retry_after_s: float = 60.0

    def should_retry(self, attempt: int, *, status: int | None, retry_after_s: float | None) -> bool:
        """Whether to try again after ``attempt`` (1-based) failed; ``status`` is ``None`` when the
        attempt got no answer at all."""
        if attempt >= self.max_attempts:
            return False
        if status is not None and status not in RETRYABLE_STATUSES:
            return False
        return retry_after_s is None or retry_after_s <= self.max_retry_after_s

    def delay_s(
        self,
        attempt: int,
        *,
        status: int | None,
        retry_after_s: float | None,
        rng: random.Random,
    ) -> float | None:
        """How long to wait before trying again after ``attempt`` (1-based) failed, or ``None`` to stop."""
        if not self.should_retry(attempt, status=status, retry_after_s=retry_after_s):
            return None
        delay = backoff_s(attempt - 1, base_s=self.base_s, cap_s=self.cap_s, rng=rng)
        return delay if retry_after_s is None else max(delay, retry_after_s)

    def retrying(self, *, rng: random.Random, sleep: Callable[[float], None]) -> Retrying:
        """A tenacity loop for a blocking attempt that raises ``ApiError`` or ``TransportFailed``."""
        return Retrying(sleep=sleep, stop=stop_never, retry=self._tenacity_retry, wait=self._tenacity_wait(rng))

    def async_retrying(self, *, rng: random.Random, sleep: Callable[[float], Awaitable[None]]) -> AsyncRetrying:
        """The same loop for an async attempt."""
        return AsyncRetrying(sleep=sleep, stop=stop_never, retry=self._tenacity_retry, wait=self._tenacity_wait(rng))

    def _tenacity_retry(self, retry_state: RetryCallState) -> bool:
        failure = _failure(retry_state)
        if failure is None:  # a success, or an error this policy does not know: not retried
            return False
        status, retry_after_s = failure
        return self.should_retry(retry_state.attempt_number, status=status, retry_after_s=retry_after_s)

    def _tenacity_wait(self, rng: random.Random) -> Callable[[RetryCallState], float]:
        jitter = wait_equal_jitter(base_s=self.base_s, cap_s=self.cap_s, rng=rng)

        def wait(retry_state: RetryCallState) -> float:
            delay = jitter(retry_state)
            failure = _failure(retry_state)
            hint = failure[1] if failure is not None else None
            return delay if hint is None else max(delay, hint)

        return wait


def _failure(retry_state: RetryCallState) -> tuple[int | None, float | None] | None:
    """``(status, retry_after_s)`` of the attempt's error; ``None`` when it did not fail with one of ours."""
    outcome = retry_state.outcome
    if outcome is None or not outcome.failed:
        return None
    error = outcome.exception()
    if isinstance(error, TransportFailed):
        return None, None
    if isinstance(error, ApiError):
        return error.status, error.retry_after_s
    return None

"""When to retry a request, and how long to wait first. Pure functions: no I/O, no clock.

Every request this client sends is safe to repeat: reads are GETs, a create carries the same
Idempotency-Key on every attempt (the server replays the first answer), and a cancel of a canceled
generation changes nothing. So connection errors, 408, 429 and 5xx (except 501) are retried with
exponential backoff and "equal jitter" (half fixed, half random), never sooner than ``Retry-After``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["RETRYABLE_STATUSES", "RetryPolicy", "backoff_s", "parse_retry_after"]

RETRYABLE_STATUSES: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504})


def backoff_s(retry_index: int, *, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Delay before retry number ``retry_index`` (0 = first retry): uniform in ``[c/2, c]``, where
    ``c = min(cap_s, base_s * 2**retry_index)``. Half of it is fixed so retries never bunch at zero."""
    ceiling = min(cap_s, base_s * 2.0**retry_index)
    return ceiling / 2.0 + rng.uniform(0.0, ceiling / 2.0)


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

    def delay_s(
        self,
        attempt: int,
        *,
        status: int | None,
        retry_after_s: float | None,
        rng: random.Random,
    ) -> float | None:
        """How long to wait before trying again after ``attempt`` (1-based) failed, or ``None`` to stop.

        ``status`` is the HTTP status, or ``None`` when the attempt got no answer at all.
        """
        if attempt >= self.max_attempts:
            return None
        if status is not None and status not in RETRYABLE_STATUSES:
            return None
        delay = backoff_s(attempt - 1, base_s=self.base_s, cap_s=self.cap_s, rng=rng)
        if retry_after_s is not None:
            if retry_after_s > self.max_retry_after_s:
                return None
            delay = max(delay, retry_after_s)
        return delay

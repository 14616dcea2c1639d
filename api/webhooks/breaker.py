"""An endpoint's circuit breaker: from its run of failed attempts to when it may be tried again.

Read off the stored ``Endpoint`` (so every sender sharing the store sees the same state):

| state | when | what the sender does |
|---|---|---|
| closed | under ``circuit_after_failures`` failed attempts in a row | sends as due, up to the caps |
| open | ``circuit_open_until`` is in the future | holds its deliveries until then, no attempt used |
| half-open | the run is long enough, the open period is over | one attempt (a probe) at a time |
| disabled | ``disable_after_failures`` in a row over ``disable_after_s`` | fails the pending ones, with the reason |

A probe's 2xx closes the circuit; its failure opens it again for twice as long, up to
``circuit_max_open_s``. An endpoint that hangs therefore costs its project one slot per open period
instead of the sender's whole pool, and a tenant whose receiver comes back gets its backlog within one
open period. Every attempt's result counts, not only timeouts: a receiver answering 500 fast is as
unable to take a delivery as one that hangs, only cheaper.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from api.webhooks.models import Endpoint
from api.webhooks.transport import PostResult
from foundation.settings import WebhookSettings

__all__ = ["BreakerStep", "after_attempt", "held_until", "in_flight_limit"]

log = logging.getLogger("genworker.webhooks")


@dataclass(frozen=True)
class BreakerStep:
    endpoint: Endpoint
    opened: bool = False  # this failure opened the circuit (or a failed probe reopened it)
    disabled: bool = False  # this failure disabled the endpoint


def held_until(endpoint: Endpoint, now: datetime) -> datetime | None:
    """When the endpoint's open circuit lets a probe go, if it is open now."""
    until = endpoint.circuit_open_until
    return until if until is not None and until > now else None


def in_flight_limit(endpoint: Endpoint, settings: WebhookSettings) -> int:
    """Attempts one sender may have in flight to this endpoint: one probe while it is failing."""
    if endpoint.consecutive_failures >= settings.circuit_after_failures:
        return 1
    return settings.max_in_flight_per_endpoint


def _open_period(failures: int, settings: WebhookSettings) -> timedelta:
    doublings = min(failures - settings.circuit_after_failures, 30)
    return timedelta(seconds=min(settings.circuit_max_open_s, settings.circuit_open_s * 2**doublings))


def after_attempt(endpoint: Endpoint, result: PostResult, now: datetime, settings: WebhookSettings) -> BreakerStep:
    """The endpoint after one attempt's result: its failure run extended or ended, the circuit opened."""
    if result.ok:
        closed = endpoint.model_copy(
            update={"failing_since": None, "consecutive_failures": 0, "circuit_open_until": None}
        )
        return BreakerStep(closed)
    since = endpoint.failing_since or now
    failures = endpoint.consecutive_failures + 1
    update: dict[str, object] = {"failing_since": since, "consecutive_failures": failures}
    opened = disabled = False
    last = result.error or f"HTTP {result.status_code}"
    if endpoint.active and failures >= settings.circuit_after_failures:
        update["circuit_open_until"] = now + _open_period(failures, settings)
        opened = True
    if (
        endpoint.active
        and failures >= settings.disable_after_failures
        and now - since >= timedelta(seconds=settings.disable_after_s)
    ):
        reason = f"circuit breaker: {failures} failed attempts in a row since {since.isoformat(timespec='seconds')}"
        update |= {"disabled_at": now, "disabled_reason": f"{reason}; last: {last}"}
        opened, disabled = False, True
    step = BreakerStep(endpoint.model_copy(update=update), opened=opened, disabled=disabled)
    if disabled:
        log.warning("webhook endpoint disabled", extra={"endpoint": endpoint.id, "reason": update["disabled_reason"]})
    elif opened:
        log.warning(
            "webhook endpoint circuit open",
            extra={
                "endpoint": endpoint.id,
                "failures": failures,
                "until": update["circuit_open_until"].isoformat(),  # type: ignore[attr-defined]
                "last_error": last,
            },
        )
    return step

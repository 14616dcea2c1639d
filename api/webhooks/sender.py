"""The webhook sender: fan queue events out to deliveries, and send due deliveries until accepted.

It holds nothing another process needs: the cursor, the deliveries, their schedule and the endpoints'
failure runs are in the ``WebhookStore``. A sender killed at any point resumes from there: an event
fanned out but not yet under the cursor is fanned out again into the same deliveries (derived ids); a
delivery claimed but not yet written back is due again after ``webhooks.lease_s`` and is sent again
with the same ``webhook-id``; a delivery waiting for a retry keeps its stored due time.

Where it runs: a thread of every API process (``webhooks.sender_in_api``, the default; ``genworker
up`` gets one this way) and/or ``genworker webhooks serve`` processes. Any number may share a store.

Retry rule: attempt n (1-based) failed → the next one after ``backoff_s(n - 1)``, uniform in
``[c/2, c]`` with ``c = min(cap, base * 2**(n-1))`` (the client's own rule, ``genworker_client.retry``),
until ``max_age_s`` after the event: then the delivery is ``failed``. An endpoint with
``disable_after_failures`` failed attempts in a row spanning ``disable_after_s`` is disabled with the
reason; its pending deliveries fail when their turn comes (``genworker webhooks enable`` and
``redeliver`` bring it back).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from standardwebhooks.webhooks import Webhook

from api.errors import SealingError
from api.webhooks.events import deliveries_for, event_type
from api.webhooks.models import ATTEMPTS_KEPT, Attempt, Delivery, DeliveryState, Endpoint
from api.webhooks.sealing import Sealer
from api.webhooks.store import WebhookStore
from api.webhooks.transport import PostResult, Transport
from foundation.core.contract import GenerationRecord
from foundation.core.errors import BackendUnavailable
from foundation.queue.base import ApiQueue
from foundation.settings import WebhookSettings
from genworker_client.retry import backoff_s

__all__ = ["Sender", "signed_headers"]

log = logging.getLogger("genworker.webhooks")

EVENTS_PER_READ = 500
USER_AGENT = "genworker-webhooks/1"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def signed_headers(secret: str, delivery_id: str, body: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt; the timestamp is the attempt's, so a captured
    request replayed later fails the receiver's age check."""
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(delivery_id, at, body),
    }


class Sender:
    def __init__(
        self,
        queue: ApiQueue,
        store: WebhookStore,
        sealer: Sealer,
        transport: Transport,
        settings: WebhookSettings,
        *,
        clock: Callable[[], datetime] = _utcnow,
        rng: random.Random | None = None,
    ) -> None:
        self.queue = queue
        self.store = store
        self.sealer = sealer
        self.transport = transport
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self._pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="genworker-webhook")
        self._endpoint_lock = threading.Lock()  # one failure-run update at a time in this process

    # ------------------------------------------------------------------------------------- fan-out
    def fan_out(self) -> int:
        """Turn the queue events after the cursor into deliveries; the number of events read."""
        events = self.queue.events(after=self.store.cursor(), limit=EVENTS_PER_READ)
        if not events:
            return 0
        endpoints = [e for e in self.store.list_endpoints() if e.active]
        records: dict[str, GenerationRecord | None] = {}
        for event in events:
            if endpoints and event_type(event) is not None:
                if event.job_id not in records:
                    records[event.job_id] = self.queue.get(event.job_id)
                record = records[event.job_id]
                if record is not None:  # expired: nothing left to tell
                    for delivery in deliveries_for(event, record, endpoints):
                        if self.store.add_delivery(delivery):
                            log.info(
                                "webhook delivery created",
                                extra={
                                    "delivery": delivery.id,
                                    "endpoint": delivery.endpoint_id,
                                    "event_type": delivery.event_type.value,
                                    "job_id": record.id,
                                },
                            )
        self.store.set_cursor(events[-1].id)
        return len(events)

    # ------------------------------------------------------------------------------------ delivery
    def deliver_due(self) -> int:
        """Send the deliveries due now (at most ``concurrency`` at once); how many were sent."""
        claimed = self.store.claim_due(self.clock(), lease_s=self.settings.lease_s, limit=self.settings.concurrency)
        list(self._pool.map(self.deliver, claimed))
        return len(claimed)

    def deliver(self, delivery: Delivery) -> Delivery:
        """One attempt at a claimed delivery, written back with its outcome."""
        endpoint = self.store.get_endpoint(delivery.endpoint_id)
        if endpoint is None or not endpoint.active:
            reason = "endpoint removed" if endpoint is None else f"endpoint disabled: {endpoint.disabled_reason}"
            return self._finish(delivery, DeliveryState.failed, reason)
        now = self.clock()
        try:
            secret = self.sealer.open(endpoint.sealed_secret)
        except SealingError:
            # This process has another server key than the one that sealed the secret (replicas
            # without a shared webhooks.secret_key): leave the delivery for its lease to lapse, so a
            # sender with the right key can take it, and say so loudly.
            log.error(
                "webhook secret cannot be opened: set one webhooks.secret_key on every sender",
                extra={"delivery": delivery.id, "endpoint": endpoint.id},
            )
            return delivery
        headers = signed_headers(secret, delivery.id, delivery.body, now)
        result = self.transport.post(endpoint.url, delivery.body.encode("utf-8"), headers)
        attempt = Attempt(at=now, status_code=result.status_code, error=result.error, duration_ms=result.duration_ms)
        delivery = delivery.model_copy(
            update={
                "attempts": [*delivery.attempts, attempt][-ATTEMPTS_KEPT:],
                "attempt_count": delivery.attempt_count + 1,
            }
        )
        self._note_endpoint(endpoint.id, result, now)
        extra = {
            "delivery": delivery.id,
            "endpoint": endpoint.id,
            "attempt": delivery.attempt_count,
            "status_code": result.status_code,
            "error": result.error,
        }
        if result.ok:
            log.info("webhook delivered", extra=extra)
            return self._finish(delivery, DeliveryState.delivered, None, delivered_at=now)
        if result.refused:
            log.warning("webhook refused by the outbound rules", extra=extra)
            return self._finish(delivery, DeliveryState.failed, f"refused: {result.error}")
        delay = backoff_s(
            delivery.attempt_count - 1,
            base_s=self.settings.backoff_base_s,
            cap_s=self.settings.backoff_cap_s,
            rng=self.rng,
        )
        next_at = now + timedelta(seconds=delay)
        if next_at - delivery.created_at > timedelta(seconds=self.settings.max_age_s):
            log.warning("webhook given up", extra=extra)
            reason = f"no 2xx answer in {delivery.attempt_count} attempts over {self.settings.max_age_s:g} s"
            return self._finish(delivery, DeliveryState.failed, reason)
        log.info("webhook attempt failed; retrying", extra={**extra, "retry_in_s": round(delay, 3)})
        delivery = delivery.model_copy(update={"next_attempt_at": next_at})
        self.store.save_delivery(delivery)
        return delivery

    def _finish(
        self, delivery: Delivery, state: DeliveryState, reason: str | None, *, delivered_at: datetime | None = None
    ) -> Delivery:
        delivery = delivery.model_copy(
            update={"state": state, "failure_reason": reason, "delivered_at": delivered_at, "next_attempt_at": None}
        )
        self.store.save_delivery(delivery)
        return delivery

    def _note_endpoint(self, endpoint_id: str, result: PostResult, now: datetime) -> None:
        """Extend or end the endpoint's run of failures; disable it when the run is long enough."""
        with self._endpoint_lock:
            endpoint = self.store.get_endpoint(endpoint_id)
            if endpoint is None:
                return
            updated = self._after_attempt(endpoint, result, now)
            if updated != endpoint:
                self.store.save_endpoint(updated)

    def _after_attempt(self, endpoint: Endpoint, result: PostResult, now: datetime) -> Endpoint:
        if result.ok:
            return endpoint.model_copy(update={"failing_since": None, "consecutive_failures": 0})
        since = endpoint.failing_since or now
        failures = endpoint.consecutive_failures + 1
        update: dict[str, object] = {"failing_since": since, "consecutive_failures": failures}
        s = self.settings
        if (
            endpoint.active
            and failures >= s.disable_after_failures
            and now - since >= timedelta(seconds=s.disable_after_s)
        ):
            reason = f"{failures} failed attempts in a row since {since.isoformat(timespec='seconds')}; last: "
            reason += result.error or f"HTTP {result.status_code}"
            update |= {"disabled_at": now, "disabled_reason": reason}
            log.warning("webhook endpoint disabled", extra={"endpoint": endpoint.id, "reason": reason})
        return endpoint.model_copy(update=update)

    # --------------------------------------------------------------------------------------- loop
    def run_once(self) -> int:
        return self.fan_out() + self.deliver_due()

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: fan out and deliver, sleeping ``poll_interval_s`` when idle. A backend
        that does not answer is logged and tried again; nothing is lost meanwhile."""
        while not stop.is_set():
            try:
                busy = self.run_once()
            except BackendUnavailable as e:
                log.warning("webhook sender: backend unavailable", extra={"error": str(e)})
                busy = 0
            except Exception:  # a bug in one round must not end the sender for good
                log.exception("webhook sender round failed")
                busy = 0
            if not busy:
                stop.wait(self.settings.poll_interval_s)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class SenderThread:
    """A sender on a daemon thread, for the API process (started and stopped by its lifespan)."""

    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self._stop = threading.Event()
        self._thread = threading.Thread(target=sender.run, args=(self._stop,), name="genworker-webhooks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self.sender.close()

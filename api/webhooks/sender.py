"""The webhook sender: fan queue events out to deliveries, and send due deliveries until accepted.

It holds nothing another process needs: the cursor, the deliveries, their schedule and the endpoints'
failure runs are in the ``WebhookStore``. A sender killed at any point resumes from there: an event
fanned out but not yet under the cursor is fanned out again into the same deliveries (derived ids); a
delivery claimed but not yet written back is due again after ``webhooks.lease_s`` and is sent again
with the same ``webhook-id``; a delivery waiting for a retry keeps its stored due time.

Where it runs: a thread of every API process (``webhooks.sender_in_api``, the default; ``genworker
up`` gets one this way) and/or ``genworker webhooks serve`` processes. Any number may share a store.

Deliveries run as a continuous pool: each attempt holds one of ``concurrency`` slots only while it is in
flight, and a freed slot is filled at once with the next due delivery, so one slow receiver never makes
the others wait for it (no batch waits for its slowest member). The slots are shared fairly
(``api.webhooks.slots``): one endpoint and one project may hold only a few, and a delivery whose endpoint
or project has its share in flight is due again a poll later without using an attempt. The claim is fair
by project too: it takes at most a project's share of each project with due deliveries and none of a
project whose share is in flight or waiting here, so a project's backlog (20,000 deliveries due to a
receiver that never answers) is never swept ahead of another project's next delivery. An endpoint whose
attempts keep failing is held by its circuit breaker, then disabled (``api.webhooks.breaker``).

A generation's own webhook (a create's ``webhook_url``) is one more delivery per event, sent to its URL and
signed with its project's secret (``api.webhooks.project_secrets``). For the slots and the breaker its
endpoint is the URL's origin within the project (``models.origin_id``): generations sending to one receiver
share one share and one circuit, as one endpoint's deliveries do. An origin's failure run is stored only
once it fails (``WebhookStore.save_origin``) and is never disabled: there is no registration to re-enable,
and each delivery still gives up after ``max_age_s``.

A record this version cannot read never stops the fan-out: a newer version's (a rolling upgrade) is left to
that version's sender (the cursor waits before its first event, at most ``NEWER_HOLD_S``), one no version
reads is passed without deliveries; either is logged once per job (``Sender.fan_out``).

Retry rule: attempt n (1-based) failed → the next one after ``backoff_s(n - 1)``, uniform in
``[c/2, c]`` with ``c = min(cap, base * 2**(n-1))`` (``foundation.core.backoff``, the client's rule too),
until ``max_age_s`` after the event: then the delivery is ``failed``. A disabled endpoint's pending
deliveries fail when their turn comes, with the reason (``genworker webhooks enable`` and ``redeliver``
bring it back).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from standardwebhooks.webhooks import Webhook

from api.errors import SealingError
from api.webhooks.breaker import after_attempt, held_until, in_flight_limit
from api.webhooks.events import deliveries_for, event_type, request_delivery
from api.webhooks.metrics import WebhookMetrics
from api.webhooks.models import ATTEMPTS_KEPT, Attempt, Delivery, DeliveryState, Endpoint, EventType, RequestWebhook
from api.webhooks.project_secrets import project_secret, signing_secrets
from api.webhooks.sealing import Sealer
from api.webhooks.slots import Slots
from api.webhooks.store import WebhookStore
from api.webhooks.transport import PostResult, Transport
from foundation.core.backoff import backoff_s
from foundation.core.contract import GenerationRecord
from foundation.core.errors import BackendUnavailable
from foundation.queue.base import ApiQueue, Event
from foundation.queue.errors import NewerRecord, UnreadableRecord
from foundation.settings import WebhookSettings

__all__ = ["Sender", "signed_headers"]

log = logging.getLogger("genworker.webhooks")

EVENTS_PER_READ = 500
# How long the fan-out waits before an event whose record a newer version wrote, for a sender of that
# version to fan it out (a rolling upgrade's newer replicas run one); past it the event is passed, so a
# rollback, which leaves no newer sender, never stops the fan-out for long.
NEWER_HOLD_S = 600.0
_NOTED_LIMIT = 10_000  # jobs remembered as logged unreadable (_note_unreadable)
USER_AGENT = "genworker-webhooks/1"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def signed_headers(secret: str | list[str], delivery_id: str, body: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt; the timestamp is the attempt's, so a captured
    request replayed later fails the receiver's age check. Several secrets (a rotation's grace) make
    one signature each, space-separated: a receiver holding either accepts it."""
    secrets = [secret] if isinstance(secret, str) else secret
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": " ".join(Webhook(s).sign(delivery_id, at, body) for s in secrets),
    }


def fresh_origin(delivery: Delivery) -> Endpoint:
    """The endpoint of a per-request delivery whose origin has no failure run stored: closed, healthy."""
    assert delivery.url is not None
    return Endpoint(
        id=delivery.endpoint_id,
        project=delivery.project,
        url=delivery.url,
        events=list(EventType),
        sealed_secret="",  # signed with the project's secret instead
        created_at=delivery.created_at,
    )


@dataclass
class _Read:
    """What one fan-out learned of its events' jobs: each job's record and own webhook, read once."""

    records: dict[str, GenerationRecord | None] = field(default_factory=dict)
    hooks: dict[str, RequestWebhook | None] = field(default_factory=dict)
    newer: set[str] = field(default_factory=set)  # jobs whose record a newer version wrote


@dataclass(frozen=True)
class Waiting:
    delivery: Delivery
    endpoint: Endpoint
    since: float  # time.monotonic() when it began to wait


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
        metrics: WebhookMetrics | None = None,
    ) -> None:
        self.queue = queue
        self.store = store
        self.sealer = sealer
        self.transport = transport
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.metrics = metrics or WebhookMetrics()
        self.slots = Slots(settings)
        self.metrics.slots.set(settings.concurrency)
        self._pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="genworker-webhook")
        self._endpoint_lock = threading.Lock()  # one failure-run update at a time in this process
        self._wake = threading.Event()  # set when an attempt ends (a slot is free) or to stop
        # Claimed deliveries whose endpoint or project had its share in flight, started as slots free
        # (a burst to one healthy endpoint goes out as fast as it answers). Bounded: past it, deferred.
        self._waiting: list[Waiting] = []
        self._waiting_limit = 4 * settings.concurrency
        self._unreadable_noted: set[str] = set()  # jobs whose unreadable record was logged (_note_unreadable)

    # ------------------------------------------------------------------------------------- fan-out
    def fan_out(self) -> int:
        """Turn the queue events after the cursor into deliveries; the number of events the cursor passed.

        A job whose record a newer version wrote (``NewerRecord``: a rolling upgrade) is left to a sender of
        that version: the cursor stops before its first event, for that sender to fan it out, while this one
        goes on with the rest of the read (a delivery's id is derived from its event: one read again adds
        nothing). Past ``NEWER_HOLD_S`` (a rollback: no newer sender left) the event is passed. A record no
        version reads (``UnreadableRecord``) has nothing to tell: its events are passed without deliveries.
        Either is logged once per job, never an error that fails the whole round."""
        events = self.queue.events(after=self.store.cursor(), limit=EVENTS_PER_READ)
        if not events:
            return 0
        endpoints = [e for e in self.store.list_endpoints() if e.active]
        read = _Read()
        held: int | None = None  # the first event left to a newer version
        for index, event in enumerate(events):
            if event_type(event) is None:
                continue
            if event.job_id not in read.hooks:
                read.hooks[event.job_id] = self.store.get_request_webhook(event.job_id)
            hook = read.hooks[event.job_id]
            if not endpoints and hook is None:
                continue
            record = self._record(event.job_id, read)
            if record is not None:  # None: expired, nothing left to tell; or not this version's to read
                own = request_delivery(event, record, hook)
                self._add_deliveries([*deliveries_for(event, record, endpoints), *([own] if own else [])])
            elif held is None and event.job_id in read.newer and self._may_hold(event):
                held = index
        passed = len(events) if held is None else held
        if passed:
            self.store.set_cursor(events[passed - 1].id)
        return passed

    def _record(self, job_id: str, read: _Read) -> GenerationRecord | None:
        """The job's record, read once per fan-out; None when expired or unreadable by this version (then
        logged once per job; ``read.newer`` gets the job when a newer version may read it)."""
        if job_id in read.records:
            return read.records[job_id]
        read.records[job_id] = None
        try:
            read.records[job_id] = self.queue.get(job_id)
        except NewerRecord as e:
            read.newer.add(job_id)
            self._note_unreadable(job_id, "webhook events left to a newer version's sender", e)
        except UnreadableRecord as e:
            self._note_unreadable(job_id, "webhook events passed: no version reads the record", e)
        return read.records[job_id]

    def _may_hold(self, event: Event) -> bool:
        """Whether the cursor may still wait before ``event`` for a newer version's sender."""
        return self.clock() - event.at < timedelta(seconds=NEWER_HOLD_S)

    def _note_unreadable(self, job_id: str, message: str, error: UnreadableRecord) -> None:
        """Log ``message`` once per job (the cursor held before a newer record reads it again each round)."""
        if job_id in self._unreadable_noted:
            return
        if len(self._unreadable_noted) >= _NOTED_LIMIT:  # bounded: a job noted again is harmless
            self._unreadable_noted.clear()
        self._unreadable_noted.add(job_id)
        log.warning(message, extra={"job_id": job_id, "error": error.detail})

    def _add_deliveries(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            if self.store.add_delivery(delivery):
                log.info(
                    "webhook delivery created",
                    extra={
                        "delivery": delivery.id,
                        "endpoint": delivery.endpoint_id,
                        "event_type": delivery.event_type.value,
                        "job_id": delivery.generation_id,
                    },
                )

    # ------------------------------------------------------------------------------------ delivery
    def dispatch(self) -> int:
        """Start an attempt for each waiting or due delivery a free slot can take, without waiting for
        any; how many were started or claimed (0: nothing to do until a slot frees or time passes)."""
        now = self.clock()
        started = self._start_waiting(now)
        free = self.slots.free()
        if free <= 0:
            return started
        claimed = self.store.claim_due(
            now,
            lease_s=self.settings.lease_s,
            limit=free,
            per_project=self.settings.max_in_flight_per_project,
            skip=self._full_projects(),
        )
        endpoints: dict[str, Endpoint | None] = {}
        busy: list[Delivery] = []
        for delivery in claimed:
            if delivery.endpoint_id not in endpoints:
                endpoints[delivery.endpoint_id] = self._endpoint_of(delivery)
            endpoint = endpoints[delivery.endpoint_id]
            if not self._start(delivery, endpoint, now):
                if endpoint is not None and self._may_wait(endpoint.project):
                    self._waiting.append(Waiting(delivery, endpoint, time.monotonic()))
                else:
                    busy.append(delivery)
        if busy:
            # More than this sender keeps waiting: due again a poll later, no attempt used; one write
            # for all of them, since a tenant whose receivers hang makes many.
            self.store.defer(busy, now + timedelta(seconds=self.settings.poll_interval_s))
        return started + len(claimed)

    def _endpoint_of(self, delivery: Delivery) -> Endpoint | None:
        """The registered endpoint (None: removed), or a per-request delivery's origin."""
        if delivery.url is None:
            return self.store.get_endpoint(delivery.endpoint_id)
        return self.store.get_origin(delivery.endpoint_id) or fresh_origin(delivery)

    def _secrets(self, delivery: Delivery, endpoint: Endpoint, now: datetime) -> list[str]:
        """What signs the delivery: its endpoint's secret, or its project's (made on first use)."""
        if delivery.url is None:
            return [self.sealer.open(endpoint.sealed_secret)]
        return signing_secrets(project_secret(self.store, self.sealer, delivery.project, now), self.sealer, now)

    def _full_projects(self) -> set[str]:
        """Projects with their share in flight or waiting here: left out of the claim, since what it took
        of them could only wait or be handed back."""
        held = self.slots.by_project()
        for item in self._waiting:
            held[item.delivery.project] += 1
        return {p for p, n in held.items() if n >= self.settings.max_in_flight_per_project}

    def _may_wait(self, project: str) -> bool:
        """Room to wait here: a project keeps twice its in-flight share waiting at most, so a tenant whose
        receivers hang cannot fill the waiting room of the others."""
        mine = sum(1 for w in self._waiting if w.endpoint.project == project)
        return mine < 2 * self.settings.max_in_flight_per_project and len(self._waiting) < self._waiting_limit

    def _start_waiting(self, now: datetime) -> int:
        """Start the claimed deliveries that waited for their endpoint's or project's share, oldest first;
        hand back those held about half their lease (another sender may take them then)."""
        if not self._waiting:
            return 0
        started, kept, expired = 0, [], []
        stale = time.monotonic() - self.settings.lease_s / 2
        for item in self._waiting:
            if item.since < stale:
                expired.append(item.delivery)
            elif self.slots.free() > 0 and self._start(item.delivery, item.endpoint, now):
                started += 1
            else:
                kept.append(item)
        self._waiting = kept
        if expired:
            self.store.defer(expired, now)
        return started

    def _start(self, delivery: Delivery, endpoint: Endpoint | None, now: datetime) -> bool:
        """Start an attempt in a slot, or settle the delivery otherwise; False if no slot could take it."""
        if endpoint is None or not endpoint.active:
            reason = "endpoint removed" if endpoint is None else f"endpoint disabled: {endpoint.disabled_reason}"
            self._finish(delivery, DeliveryState.failed, reason)
            return True
        until = held_until(endpoint, now)
        if until is not None:
            failures = endpoint.consecutive_failures
            self._hold(delivery, until, f"endpoint circuit open until {until.isoformat()}: {failures} failed in a row")
            return True
        if not self.slots.take(endpoint.id, endpoint.project, in_flight_limit(endpoint, self.settings)):
            return False
        try:
            secrets = self._secrets(delivery, endpoint, now)
        except SealingError:
            # This process has another server key than the one that sealed the secret: leave the
            # delivery for its lease to lapse, so a sender with the right key can take it.
            self.slots.give_back(endpoint.id, endpoint.project)
            log.error(
                "webhook secret cannot be opened: set one webhooks.secret_key on every sender",
                extra={"delivery": delivery.id, "endpoint": endpoint.id},
            )
            return True
        self.metrics.in_flight.inc()
        due = delivery.next_attempt_at or delivery.created_at
        self.metrics.wait_seconds.observe(max(0.0, (now - due).total_seconds()))
        future = self._pool.submit(self.attempt, delivery, endpoint, secrets)
        future.add_done_callback(lambda _: self._slot_freed(endpoint))
        return True

    def _slot_freed(self, endpoint: Endpoint) -> None:
        self.slots.give_back(endpoint.id, endpoint.project)
        self.metrics.in_flight.dec()
        self._wake.set()  # a slot is free: claim at once, not at the next poll

    def _hold(self, delivery: Delivery, until: datetime, reason: str | None) -> None:
        """Due again at ``until`` with no attempt used, unless that is past the delivery's age limit."""
        if until - delivery.created_at > timedelta(seconds=self.settings.max_age_s):
            why = f"no 2xx answer in {delivery.attempt_count} attempts over {self.settings.max_age_s:g} s"
            self._finish(delivery, DeliveryState.failed, f"{why}; {reason}" if reason else why)
            return
        self.store.save_delivery(delivery.model_copy(update={"next_attempt_at": until, "held_reason": reason}))

    def attempt(self, delivery: Delivery, endpoint: Endpoint, secrets: list[str]) -> Delivery:
        """One attempt at a claimed delivery (in a slot), written back with its outcome."""
        now = self.clock()
        headers = signed_headers(secrets, delivery.id, delivery.body, now)
        result = self.transport.post(delivery.url or endpoint.url, delivery.body.encode("utf-8"), headers)
        self.metrics.attempts.labels(result.result).inc()
        self.metrics.attempt_seconds.observe(result.duration_ms / 1000)
        attempt = Attempt(at=now, status_code=result.status_code, error=result.error, duration_ms=result.duration_ms)
        delivery = delivery.model_copy(
            update={
                "attempts": [*delivery.attempts, attempt][-ATTEMPTS_KEPT:],
                "attempt_count": delivery.attempt_count + 1,
                "held_reason": None,
            }
        )
        self._note_endpoint(delivery, endpoint, result, now)
        extra = {
            "delivery": delivery.id,
            "endpoint": endpoint.id,
            "attempt": delivery.attempt_count,
            "status_code": result.status_code,
            "error": result.error,
        }
        if result.ok:
            log.info("webhook delivered", extra=extra)
            self.metrics.delivery_seconds.observe(max(0.0, (self.clock() - delivery.created_at).total_seconds()))
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
            update={
                "state": state,
                "failure_reason": reason,
                "delivered_at": delivered_at,
                "next_attempt_at": None,
                "held_reason": None,
            }
        )
        self.store.save_delivery(delivery)
        self.metrics.deliveries.labels(state.value).inc()
        return delivery

    def _note_endpoint(self, delivery: Delivery, sent_to: Endpoint, result: PostResult, now: datetime) -> None:
        """Extend or end the endpoint's run of failures: the breaker's step (``api.webhooks.breaker``)."""
        origin = delivery.url is not None
        with self._endpoint_lock:
            endpoint = self._endpoint_of(delivery) if origin else self.store.get_endpoint(sent_to.id)
            if endpoint is None:
                return
            step = after_attempt(endpoint, result, now, self.settings, may_disable=not origin)
            if step.endpoint != endpoint:
                (self.store.save_origin if origin else self.store.save_endpoint)(step.endpoint)
        if step.opened:
            self.metrics.circuit_opened.inc()
        if step.disabled:
            self.metrics.endpoints_disabled.inc()

    # --------------------------------------------------------------------------------------- loop
    def run_once(self) -> int:
        return self.fan_out() + self.dispatch()

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: fan out and start attempts; when idle, wait until a slot frees or
        ``poll_interval_s`` passes. A backend that does not answer is logged and tried again; nothing
        is lost meanwhile."""
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
                self._wake.wait(self.settings.poll_interval_s)
                self._wake.clear()

    def wake(self) -> None:
        """End the idle wait now (a stop, a test)."""
        self._wake.set()

    def close(self) -> None:
        """Hand back the claimed deliveries still waiting (due now, for any sender), then let the
        attempts in flight end."""
        waiting, self._waiting = self._waiting, []
        if waiting:
            try:
                self.store.defer([w.delivery for w in waiting], self.clock())
            except BackendUnavailable:  # their leases lapse instead
                log.warning("webhook sender: waiting deliveries left to their leases", extra={"count": len(waiting)})
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
        self.sender.wake()
        deadline = time.monotonic() + timeout_s
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self.sender.close()

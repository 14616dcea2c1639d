"""``Webhooks``: the store, the sealer, the transport and (optionally) a sender thread, built from
settings once and shared by the routes, the CLI and ``genworker webhooks serve``.

Storage follows the queue: Redis when the queue is on Redis (shared by every replica), else
``<data_dir>/webhooks.db`` beside the embedded queue. On Redis the server key must be configured
(``webhooks.secret_key``): a key file of one replica's own would seal secrets no other replica can open.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from api.api_keys import check_project
from api.errors import UnknownDelivery, UnknownEndpoint, UrlRefused, WebhookKeyMissing
from api.webhooks.metrics import WebhookMetrics
from api.webhooks.models import (
    Delivery,
    DeliveryState,
    Endpoint,
    EventType,
    ProjectSecret,
    RequestWebhook,
    request_delivery_id,
)
from api.webhooks.project_secrets import DEFAULT_GRACE, project_secret, rotate
from api.webhooks.sealing import Sealer, new_secret, server_keys
from api.webhooks.sender import Sender, SenderThread
from api.webhooks.store import SqliteWebhookStore, WebhookStore
from api.webhooks.transport import Transport
from foundation.queue.base import ApiQueue
from foundation.settings import Settings, WebhookSettings
from foundation.settings.webhooks import secret_keys

__all__ = ["ALL_EVENTS", "UnknownDelivery", "UnknownEndpoint", "Webhooks", "open_webhook_store", "open_webhooks"]

ALL_EVENTS = tuple(EventType)
log = logging.getLogger("genworker.webhooks")

MAX_URL_LENGTH = 2048
MAX_ENDPOINTS_PER_PROJECT = 20


@dataclass
class Webhooks:
    store: WebhookStore
    sealer: Sealer
    transport: Transport
    settings: WebhookSettings
    metrics: WebhookMetrics = field(default_factory=WebhookMetrics)
    sender_thread: SenderThread | None = field(default=None)

    def add_endpoint(self, project: str, url: str, events: list[EventType] | None = None) -> tuple[Endpoint, str]:
        """Register a receiver; return it and its signing secret (shown once). Raises ``UrlRefused``
        for a URL no delivery may go to, ``InvalidProject`` for a bad project name."""
        check_project(project)
        check_url_shape(url)
        self.transport.check_url(url)
        secret = new_secret()
        endpoint = Endpoint(
            id="wh_" + secrets.token_hex(8),
            project=project,
            url=url,
            events=sorted(set(events or ALL_EVENTS)),
            sealed_secret=self.sealer.seal(secret),
            created_at=datetime.now(UTC),
        )
        # The cap is checked where the endpoint is stored, in one step: concurrent registrations cannot
        # all read "19" and all insert.
        if not self.store.add_endpoint(endpoint, max_per_project=MAX_ENDPOINTS_PER_PROJECT):
            raise UrlRefused(f"project {project!r} already has {MAX_ENDPOINTS_PER_PROJECT} webhook endpoints")
        return endpoint, secret

    def add_request_webhook(
        self, generation_id: str, project: str, url: str, events: list[EventType] | None = None
    ) -> RequestWebhook:
        """Keep a create's own webhook for its generation (before the job is enqueued, so the sender finds it
        at its first event). Raises ``UrlRefused`` for a URL no delivery may go to. Blocking: resolves the host."""
        check_url_shape(url)
        self.transport.check_url(url)
        hook = RequestWebhook(
            generation_id=generation_id,
            project=project,
            url=url,
            events=sorted(set(events or ALL_EVENTS)),
            created_at=datetime.now(UTC),
        )
        self.store.add_request_webhook(hook)
        return hook

    def request_deliveries(self, generation_id: str, project: str) -> list[Delivery]:
        """The deliveries to a generation's own webhook so far (none for another project's generation)."""
        found = (self.store.get_delivery(request_delivery_id(generation_id, kind)) for kind in ALL_EVENTS)
        return sorted((d for d in found if d is not None and d.project == project), key=lambda d: d.created_at)

    def signing_secret(self, project: str) -> tuple[ProjectSecret, str]:
        """The secret signing the project's per-request webhooks (made on first use), and it in the clear."""
        check_project(project)
        secret = project_secret(self.store, self.sealer, project, datetime.now(UTC))
        return secret, self.sealer.open(secret.sealed_secret)

    def rotate_signing_secret(self, project: str, grace: timedelta = DEFAULT_GRACE) -> tuple[ProjectSecret, str]:
        """A new per-request signing secret; the previous one also signs for ``grace``."""
        check_project(project)
        return rotate(self.store, self.sealer, project, datetime.now(UTC), grace)

    def endpoint(self, endpoint_id: str, project: str | None = None) -> Endpoint:
        """The endpoint, or ``UnknownEndpoint`` (also for another project's: ids must not leak)."""
        endpoint = self.store.get_endpoint(endpoint_id)
        if endpoint is None or (project is not None and endpoint.project != project):
            raise UnknownEndpoint(endpoint_id)
        return endpoint

    def enable(self, endpoint_id: str) -> Endpoint:
        endpoint = self.endpoint(endpoint_id).model_copy(
            update={
                "disabled_at": None,
                "disabled_reason": None,
                "failing_since": None,
                "consecutive_failures": 0,
                "circuit_open_until": None,
            }
        )
        self.store.save_endpoint(endpoint)
        return endpoint

    def redeliver(self, delivery_id: str, endpoint_id: str | None = None) -> Delivery:
        """Send a delivery again now, whatever its state, under the same ``webhook-id``."""
        delivery = self.store.get_delivery(delivery_id)
        if delivery is None or (endpoint_id is not None and delivery.endpoint_id != endpoint_id):
            raise UnknownDelivery(delivery_id)
        now = datetime.now(UTC)
        delivery = delivery.model_copy(
            # A manual redelivery gets a fresh max_age_s window: created_at restarts the schedule.
            update={"state": DeliveryState.pending, "next_attempt_at": now, "created_at": now, "failure_reason": None}
        )
        self.store.save_delivery(delivery)
        return delivery

    def reseal(self) -> int:
        """Seal every endpoint's and project's secret under the first server key; how many were stored
        again. After it, keys after the first may be dropped from ``webhooks.secret_key``."""
        count = 0
        for endpoint in self.store.list_endpoints():
            resealed = self.sealer.reseal(endpoint.sealed_secret)
            if resealed != endpoint.sealed_secret:
                self.store.save_endpoint(endpoint.model_copy(update={"sealed_secret": resealed}))
                count += 1
        for secret in self.store.list_project_secrets():
            update = {"sealed_secret": self.sealer.reseal(secret.sealed_secret)}
            if secret.previous_sealed is not None:
                update["previous_sealed"] = self.sealer.reseal(secret.previous_sealed)
            if any(getattr(secret, name) != value for name, value in update.items()):
                self.store.save_project_secret(secret.model_copy(update=update))
                count += 1
        return count

    def start(self) -> None:
        if self.sender_thread is not None:
            self.sender_thread.start()

    def stop(self) -> None:
        if self.sender_thread is not None:
            self.sender_thread.stop()

    def close(self) -> None:
        self.stop()
        self.transport.close()
        self.store.close()


def check_url_shape(url: str) -> None:
    """What the outbound guard does not judge: the URL's length (it is stored and shown)."""
    if len(url) > MAX_URL_LENGTH:
        raise UrlRefused(f"the URL is longer than {MAX_URL_LENGTH} characters")


def open_webhook_store(settings: Settings) -> WebhookStore:
    if settings.queue.backend == "redis":
        from api.webhooks.redis_store import RedisWebhookStore
        from foundation.queue.redis.connect import redis_client

        return RedisWebhookStore(redis_client(settings.queue, url=settings.queue.redis_url))
    return SqliteWebhookStore(Path(settings.data_dir) / "webhooks.db")


def open_webhooks(settings: Settings, *, queue: ApiQueue | None = None, transport: Transport | None = None) -> Webhooks:
    """The service; with ``queue`` and ``webhooks.sender_in_api`` on, a sender thread too (not started)."""
    from api.webhooks.outbound_transport import open_transport

    hooks = settings.webhooks
    keys = secret_keys(hooks.secret_key)
    if not keys and settings.queue.backend == "redis":
        raise WebhookKeyMissing(
            "webhooks.secret_key (GENWORKER_WEBHOOKS__SECRET_KEY) is not set and the queue is on Redis: every "
            "API replica and webhook sender must seal endpoint secrets with the same key. Make one with "
            "`genworker webhooks keygen` and give it to every replica (Kubernetes: the genworker-webhooks Secret)."
        )
    sealer = Sealer(lambda: server_keys(keys, settings.data_dir))
    store = open_webhook_store(settings)
    transport = transport or open_transport(settings)
    service = Webhooks(store=store, sealer=sealer, transport=transport, settings=hooks)
    if queue is not None:
        service.sender_thread = SenderThread(Sender(queue, store, sealer, transport, hooks, metrics=service.metrics))
    return service

"""The webhook vocabulary: endpoints, deliveries, their attempts, and the event types.

Values that cross the store boundary are pydantic models stored as JSON, as ``api.api_keys.ApiKey`` is.
A delivery's id is also its ``webhook-id`` header: derived from (endpoint, generation, event type), so
the fan-out can run twice over one event (a sender killed between writing deliveries and moving its
cursor) and still make one delivery, and every retry of it carries the same id.

A per-request webhook (a create's ``webhook_url``) is a ``RequestWebhook`` kept beside the endpoints, keyed
by its generation. Its deliveries carry their own ``url``; their ``endpoint_id`` names the URL's origin
(``origin_id``: project, scheme, host and port), the unit the sender's slots and circuit breaker count, so
many generations sending to one receiver share its fair share and its breaker as one endpoint's would.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from foundation.core.contract import WebhookEvent

__all__ = [
    "ATTEMPTS_KEPT",
    "Attempt",
    "Delivery",
    "DeliveryState",
    "Endpoint",
    "EventType",
    "ProjectSecret",
    "RequestWebhook",
    "delivery_id",
    "origin_id",
    "request_delivery_id",
]

ATTEMPTS_KEPT = 20  # the last attempts a delivery keeps (a 24 h schedule makes about 20)


# The event types are the job contract's (a create request chooses among them too).
EventType = WebhookEvent


class Endpoint(BaseModel):
    """A project's receiver. ``sealed_secret`` is the signing secret encrypted with the server key
    (``api.webhooks.sealing``); the secret itself is shown once, at creation."""

    model_config = ConfigDict(extra="ignore")

    id: str
    project: str
    url: str
    events: list[EventType]
    sealed_secret: str
    created_at: datetime
    disabled_at: datetime | None = None
    disabled_reason: str | None = None
    failing_since: datetime | None = None  # first failed attempt of the current run of failures
    consecutive_failures: int = 0
    circuit_open_until: datetime | None = None  # set by the breaker (api/webhooks/breaker.py): no attempt before

    @property
    def active(self) -> bool:
        return self.disabled_at is None


class DeliveryState(StrEnum):
    pending = "pending"  # waiting for its next attempt
    delivered = "delivered"  # a 2xx answer
    failed = "failed"  # gave up: out of time (webhooks.max_age_s), refused URL, or endpoint disabled/removed


class Attempt(BaseModel):
    model_config = ConfigDict(extra="ignore")

    at: datetime
    status_code: int | None = None  # None: no HTTP answer (refused, timeout, connection error)
    error: str | None = None
    duration_ms: int = 0


class Delivery(BaseModel):
    """One event for one endpoint, with its fixed body and its attempt log."""

    model_config = ConfigDict(extra="ignore")

    id: str  # the webhook-id header, the same on every attempt
    endpoint_id: str
    project: str
    event_type: EventType
    generation_id: str
    body: str  # the JSON body, fixed at fan-out: every attempt sends the same bytes
    url: str | None = None  # a per-request webhook's URL; None: the endpoint's
    state: DeliveryState = DeliveryState.pending
    created_at: datetime
    next_attempt_at: datetime | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    attempt_count: int = 0
    delivered_at: datetime | None = None
    failure_reason: str | None = None
    held_reason: str | None = None  # why a pending delivery waits with no attempt (its endpoint's open circuit)


def delivery_id(endpoint_id: str, generation_id: str, event_type: EventType) -> str:
    """The one delivery of this event to this endpoint (and its ``webhook-id``)."""
    digest = hashlib.sha256(f"{endpoint_id}\n{generation_id}\n{event_type.value}".encode()).hexdigest()
    return "msg_" + digest[:32]


class RequestWebhook(BaseModel):
    """A create's ``webhook_url`` and ``webhook_events``, stored by the API before the job is enqueued."""

    model_config = ConfigDict(extra="ignore")

    generation_id: str
    project: str
    url: str
    events: list[EventType]
    created_at: datetime


class ProjectSecret(BaseModel):
    """The secret that signs a project's per-request webhooks, sealed like an endpoint's. After a rotation the
    previous one signs too (a second signature) until ``previous_until``, so receivers can switch over."""

    model_config = ConfigDict(extra="ignore")

    project: str
    sealed_secret: str
    created_at: datetime
    previous_sealed: str | None = None
    previous_until: datetime | None = None


def origin_id(project: str, url: str) -> str:
    """The pseudo-endpoint of a per-request URL: its project and origin (scheme, host, port)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:  # not a port: the outbound guard refuses the URL at its first attempt
        port = 0
    origin = f"{scheme}://{(parts.hostname or '').lower()}:{port}"
    return "rq_" + hashlib.sha256(f"{project}\n{origin}".encode()).hexdigest()[:16]


def request_delivery_id(generation_id: str, event_type: EventType) -> str:
    """The one delivery of this event to the generation's own webhook (and its ``webhook-id``): found from
    the generation alone, so its log can be listed without reading the generation."""
    return delivery_id("request", generation_id, event_type)

"""From the queue's durable events to deliveries: which events are webhook events, and their bodies.

The fan-out reads ``ApiQueue.events`` (the Redis per-model event streams / the SQLite events table)
from a cursor kept in the webhook store, never a worker's memory. A body is fixed when its delivery
is made, so every attempt sends the same bytes under the same ``webhook-id``.

Body (Standard Webhooks' ``type`` / ``timestamp`` / ``data`` envelope)::

    {"type": "generation.succeeded", "timestamp": "<the status change, ISO 8601>",
     "data": {"id", "object": "generation", "project", "model", "mode", "variant", "status",
              "attempt", "created_at", "started_at", "finished_at",
              "artifacts": [{kind, content_type, bytes, sha256, width, height, fps, frames,
                             duration_seconds, audio}],   # succeeded only; never a URL or object key
              "usage", "price",                            # terminal only
              "error": {"code", "message"}}}               # failed only

A receiver that wants the files GETs the generation (``/v1/generations/{id}``) for fresh signed URLs.
A generation's own webhook (``RequestWebhook``) gets the same body as a registered endpoint.
"""

from __future__ import annotations

import json
from typing import Any

from api.webhooks.models import (
    Delivery,
    Endpoint,
    EventType,
    RequestWebhook,
    delivery_id,
    origin_id,
    request_delivery_id,
)
from foundation.core.contract import GenerationRecord, Status
from foundation.queue.base import Event

__all__ = ["body_for", "deliveries_for", "event_type", "request_delivery"]

_TYPES = {
    Status.running: EventType.generation_running,
    Status.succeeded: EventType.generation_succeeded,
    Status.failed: EventType.generation_failed,
    Status.canceled: EventType.generation_canceled,
}


def event_type(event: Event) -> EventType | None:
    """The webhook event a queue event is, if any. A running job's ``cancel_requested`` event (status
    stays running) and a re-claim after a lapsed lease map to ``generation.running`` too; the
    delivery's derived id makes them one delivery per generation."""
    return _TYPES.get(event.status)


def body_for(kind: EventType, event: Event, record: GenerationRecord) -> str:
    data: dict[str, Any] = {
        "id": record.id,
        "object": "generation",
        "project": record.project,
        "model": record.model,
        "mode": record.mode,
        "variant": record.variant,
        "status": event.status.value,
        "attempt": event.attempt,
        "created_at": record.created_at.isoformat(),
        "started_at": record.started_at.isoformat() if record.started_at else None,
    }
    if kind is not EventType.generation_running:
        data["finished_at"] = record.finished_at.isoformat() if record.finished_at else None
        data["usage"] = record.usage.model_dump(mode="json") if record.usage else None
        data["price"] = record.price.model_dump(mode="json") if record.price else None
    if kind is EventType.generation_succeeded:
        data["artifacts"] = [a.model_dump(mode="json", exclude={"key"}) for a in record.artifacts]
    if kind is EventType.generation_failed and record.error is not None:
        data["error"] = {"code": record.error.code.value, "message": record.error.message}
    envelope = {"type": kind.value, "timestamp": event.at.isoformat(), "data": data}
    return json.dumps(envelope, separators=(",", ":"), sort_keys=False)


def deliveries_for(event: Event, record: GenerationRecord, endpoints: list[Endpoint]) -> list[Delivery]:
    """One delivery per active endpoint of the record's project that subscribes to this event and
    existed when it happened (a new endpoint gets no backlog)."""
    kind = event_type(event)
    if kind is None:
        return []
    chosen = [
        e
        for e in endpoints
        if e.active and e.project == record.project and kind in e.events and e.created_at <= event.at
    ]
    if not chosen:
        return []
    body = body_for(kind, event, record)
    return [
        Delivery(
            id=delivery_id(e.id, record.id, kind),
            endpoint_id=e.id,
            project=record.project,
            event_type=kind,
            generation_id=record.id,
            body=body,
            created_at=event.at,
            next_attempt_at=event.at,
        )
        for e in chosen
    ]


def request_delivery(event: Event, record: GenerationRecord, hook: RequestWebhook | None) -> Delivery | None:
    """The delivery of this event to the generation's own webhook, if it has one that takes this event."""
    kind = event_type(event)
    if kind is None or hook is None or kind not in hook.events or hook.project != record.project:
        return None
    return Delivery(
        id=request_delivery_id(record.id, kind),
        endpoint_id=origin_id(record.project, hook.url),
        project=record.project,
        event_type=kind,
        generation_id=record.id,
        body=body_for(kind, event, record),
        url=hook.url,
        created_at=event.at,
        next_attempt_at=event.at,
    )

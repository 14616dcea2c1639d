"""genworker's client: create, poll, download and cancel generations the way the spec asks.

``Client`` (blocking) and ``AsyncClient`` (asyncio) share one set of rules: a stable Idempotency-Key
per logical generation reused on every retry, the new id handed to ``on_created`` first, polling at
~5 s then 10-15 s with jitter and never sooner than ``Retry-After``, downloads verified against the
record and retried once with a freshly signed URL. See ``docs/client.md``.
"""

from __future__ import annotations

from genworker_client.aio import AsyncClient
from genworker_client.cadence import PollCadence
from genworker_client.errors import ApiError, ClientError, IntegrityError, TransportFailed, WaitTimeout
from genworker_client.events import StreamEvent
from genworker_client.ledger import KeyLedger, LedgerConflict, new_idempotency_key
from genworker_client.models import (
    TERMINAL_STATUSES,
    Artifact,
    Generation,
    GenerationError,
    GenerationPage,
    Model,
    Money,
)
from genworker_client.retry import RetryPolicy
from genworker_client.sync import Client
from genworker_client.webhooks import InvalidWebhook, verify_webhook

__all__ = [
    "TERMINAL_STATUSES",
    "ApiError",
    "Artifact",
    "AsyncClient",
    "Client",
    "ClientError",
    "Generation",
    "GenerationError",
    "GenerationPage",
    "IntegrityError",
    "InvalidWebhook",
    "KeyLedger",
    "LedgerConflict",
    "Model",
    "Money",
    "PollCadence",
    "RetryPolicy",
    "StreamEvent",
    "TransportFailed",
    "WaitTimeout",
    "new_idempotency_key",
    "verify_webhook",
]

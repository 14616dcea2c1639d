"""What the service sends back, as typed models that ignore unknown fields.

The contract grows inside v1 ("clients tolerate new fields"), so every model here uses
``extra="ignore"`` and keeps ``status``, ``kind`` and codes as plain strings: a status this client has
never heard of parses fine and simply counts as not terminal.

Response metadata that is not part of the record (the ``Retry-After`` hint, the Idempotency-Key the
client sent, whether the create was a replay) rides on ``Generation`` as read-only properties.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

__all__ = [
    "TERMINAL_STATUSES",
    "Artifact",
    "Generation",
    "GenerationError",
    "GenerationPage",
    "Model",
    "Money",
]

TERMINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "canceled"})

_Lenient = ConfigDict(extra="ignore")


class Money(BaseModel):
    """A USD amount. ``amount`` stays a decimal string on the wire; ``value`` gives a ``Decimal``."""

    model_config = _Lenient

    currency: str = "USD"
    amount: str

    @property
    def value(self) -> Decimal:
        return Decimal(self.amount)


class Artifact(BaseModel):
    """One downloadable result. ``download_url`` is short-lived; a later GET of the generation re-signs it."""

    model_config = _Lenient

    kind: str = "video"
    download_url: str | None = None
    expires_at: datetime | None = None
    content_type: str | None = None
    bytes: int | None = None
    sha256: str | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    frames: int | None = None
    duration_seconds: float | None = None


class GenerationError(BaseModel):
    """Why a generation failed (``failed`` records only)."""

    model_config = _Lenient

    code: str
    message: str = ""


class Generation(BaseModel):
    """A generation record as ``GET /v1/generations/{id}`` returns it (fields beyond ``id`` optional)."""

    model_config = _Lenient

    id: str
    status: str = "queued"
    stage: str | None = None
    progress: float | None = None
    model: str | None = None
    mode: str | None = None
    variant: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    input: dict[str, Any] = Field(default_factory=dict)
    actual_prompt: str | None = None
    price_hold: Money | None = None
    price: Money | None = None
    usage: dict[str, Any] | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    error: GenerationError | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    _retry_after_s: float | None = PrivateAttr(default=None)
    _idempotency_key: str | None = PrivateAttr(default=None)
    _replayed: bool = PrivateAttr(default=False)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @property
    def retry_after_s(self) -> float | None:
        """The server's ``Retry-After`` hint on the response that carried this record, if any."""
        return self._retry_after_s

    @property
    def idempotency_key(self) -> str | None:
        """The Idempotency-Key sent with the create call that returned this record (create only)."""
        return self._idempotency_key

    @property
    def replayed(self) -> bool:
        """True when the server answered a create by replaying an earlier one (same key, same body)."""
        return self._replayed


class GenerationPage(BaseModel):
    """One page of ``GET /v1/generations``; pass ``next_cursor`` back to get the next page."""

    model_config = _Lenient

    data: list[Generation] = Field(default_factory=list)
    next_cursor: str | None = None
    # Generations of this page's stretch left out because the service cannot read their records (written by a
    # newer version during an upgrade); a later request may list them. 0 from a server that does not say.
    skipped: int = 0


class Model(BaseModel):
    """A catalog entry from ``GET /v1/models``. Only ``id`` is relied on; the rest is kept as sent.

    Catalog records are open-ended (capabilities, allowed values, rates, live availability), so this
    model keeps unknown fields (``extra="allow"``) for callers that print or inspect them.
    """

    model_config = ConfigDict(extra="allow")

    id: str
    available: bool | None = None

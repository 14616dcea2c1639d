"""Queue settings (the ``queue`` section of ``Settings``; env ``GENWORKER_QUEUE__*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["QueueSettings"]


class QueueSettings(BaseModel):
    backend: Literal["sqlite", "redis"] = "sqlite"
    sqlite_path: str = "var/queue.db"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Lease granted by a claim and renewed by a heartbeat thread; a job is re-delivered only when
    # its lease lapses (the worker died), never because it is long.
    lease_ttl_s: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=3, ge=1, le=100)
    retry_backoff_s: float = Field(default=2.0, ge=0)

"""Open the queue backend the settings name."""

from __future__ import annotations

from worker.queue.base import JobQueue
from worker.queue.config import QueueSettings
from worker.queue.redis_backend import RedisQueue
from worker.queue.redis_connect import redis_client
from worker.queue.sqlite_backend import SqliteQueue

__all__ = ["open_queue"]


def open_queue(settings: QueueSettings) -> JobQueue:
    """A ``RedisQueue`` (``backend: redis``) or a ``SqliteQueue`` (``backend: sqlite``, the default).

    Redis is reached in ``settings.redis_mode`` (one server, Cluster or Sentinel; see ``redis_connect``)."""
    common = {
        "lease_ttl_s": settings.lease_ttl_s,
        "max_attempts": settings.max_attempts,
        "retry_backoff_s": settings.retry_backoff_s,
    }
    if settings.backend == "redis":
        return RedisQueue(redis_client(settings), **common)  # type: ignore[arg-type]
    return SqliteQueue(settings.sqlite_path, **common)  # type: ignore[arg-type]

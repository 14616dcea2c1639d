"""Open the queue backend the settings name."""

from __future__ import annotations

import redis

from worker.queue.base import JobQueue
from worker.queue.config import QueueSettings
from worker.queue.redis_backend import RedisQueue
from worker.queue.sqlite_backend import SqliteQueue

__all__ = ["open_queue"]


def open_queue(settings: QueueSettings) -> JobQueue:
    """A ``RedisQueue`` (``backend: redis``) or a ``SqliteQueue`` (``backend: sqlite``, the default)."""
    common = {
        "lease_ttl_s": settings.lease_ttl_s,
        "max_attempts": settings.max_attempts,
        "retry_backoff_s": settings.retry_backoff_s,
    }
    if settings.backend == "redis":
        # Redis Cluster (redis.cluster.RedisCluster) slots in here later: every atomic step already
        # stays within one slot.
        client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
        return RedisQueue(client, **common)  # type: ignore[arg-type]
    return SqliteQueue(settings.sqlite_path, **common)  # type: ignore[arg-type]

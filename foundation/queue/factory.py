"""Open the queue backend the settings name."""

from __future__ import annotations

from foundation.queue.base import JobQueue
from foundation.queue.config import QueueSettings
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.redis.connect import redis_client
from foundation.queue.redis.durability import Durability, probe
from foundation.queue.sqlite.backend import SqliteQueue
from foundation.queue.unavailable import redis_unavailable

__all__ = ["open_queue"]


def open_queue(settings: QueueSettings) -> JobQueue:
    """A ``RedisQueue`` (``backend: redis``) or a ``SqliteQueue`` (``backend: sqlite``, the default).

    Redis is reached in ``settings.redis_mode`` (one server, Cluster or Sentinel; see ``redis_connect``)."""
    common = {
        "lease_ttl_s": settings.lease_ttl_s,
        "max_attempts": settings.max_attempts,
        "retry_backoff_s": settings.retry_backoff_s,
        "newer_record_wait_s": settings.newer_record_wait_s,
        "fair": settings.fair,
    }
    record_ttl_s = settings.record_ttl_days * 86400
    if settings.backend == "redis":
        client = redis_client(settings)
        # An unset wait_replicas is settled by the first commit (``Durability.settled``), not here.
        durability = Durability(settings.wait_replicas, settings.wait_aof, settings.wait_timeout_ms)
        with redis_unavailable:
            probe(client, durability)
        return RedisQueue(
            client,
            durability=durability,
            record_ttl_s=record_ttl_s,
            consumer_idle_s=settings.consumer_idle_s,
            **common,  # type: ignore[arg-type]
        )
    return SqliteQueue(
        settings.sqlite_path,
        record_ttl_s=record_ttl_s,
        group_commit=settings.sqlite_group_commit,
        **common,  # type: ignore[arg-type]
    )

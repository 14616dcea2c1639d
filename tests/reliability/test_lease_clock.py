"""Leases are decided by the Redis server's clock, not the workers' clocks.

Argument: a lease is the idle time of the job's entry in the consumer group's pending list (PEL).
``renew`` is ``XCLAIM ... JUSTID`` (resets idle to 0 on the server) and lapsed leases are found with
``XAUTOCLAIM min-idle-time = lease TTL``: both compare server-side times only, so a worker whose wall
clock is wrong (or jumps) can neither keep a lease it stopped renewing nor lose one it renews.
This test reads the PEL idle time the server reports and shows re-delivery follows it.
The SQLite backend, which has no server, keeps its leases on the machine's monotonic clock per boot:
``tests/integration/test_queue_sqlite_clock.py`` steps its wall clock and changes its boot.
"""

from __future__ import annotations

import time

from foundation.core.catalog import load_catalog
from foundation.queue.keys import job_stream
from foundation.queue.redis.backend import RedisQueue
from tests.integration.worker_harness import make_record


def pel_idle_ms(queue_url: str, model: str) -> int:
    import redis

    client = redis.Redis.from_url(queue_url, decode_responses=True)
    try:
        group = client.xinfo_groups(job_stream(model))[0]["name"]
        pending = client.xpending_range(job_stream(model), group, min="-", max="+", count=10)
        return int(pending[0]["time_since_delivered"])
    finally:
        client.close()


def test_lease_expiry_follows_the_servers_pel_idle_time(redis_url: str) -> None:
    lease = 1.0
    holder = RedisQueue(redis_url, lease_ttl_s=lease)
    other = RedisQueue(redis_url, lease_ttl_s=lease)
    record = make_record(load_catalog(), "tiny-wan", variant="fast", resolution="144p", duration_seconds=1)
    holder.enqueue(record)
    claim = holder.claim("holder", ["tiny-wan"], block_s=1)
    assert claim is not None
    for _ in range(4):  # renewed across 3+ lease periods: the server's idle time stays small
        time.sleep(lease * 0.6)
        assert holder.renew(claim)
        assert pel_idle_ms(redis_url, "tiny-wan") < lease * 1000
        assert other.reclaim_expired() == 0
        assert other.claim("other", ["tiny-wan"], block_s=0) is None
    time.sleep(lease * 1.5)  # renewals stop: only the server-side idle time grows
    assert pel_idle_ms(redis_url, "tiny-wan") >= lease * 1000
    assert other.reclaim_expired() == 1
    again = other.claim("other", ["tiny-wan"], block_s=1)
    assert again is not None and again.attempt == 2
    assert not holder.renew(claim)  # the stale attempt is fenced off
    holder.close()
    other.close()

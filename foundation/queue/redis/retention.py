"""Retention on Redis: what the commit that ends a job cannot expire by itself, swept periodically.

``commit.lua`` gives a terminal job's hash and its own events stream a TTL (``record_ttl``), and
idempotency keys carry their 24 h TTL from the start. ``RedisRetention.purge`` (run by the worker's
sweeper, ``worker.sweeper``) removes the rest, each step bounded per run:

1. consumers of each model's group idle past ``consumer_idle_s`` that hold nothing (``consumers.lua``:
   every worker process is a new consumer of each model it hosts);
2. entries of each model's events feed older than ``record_ttl`` (the feed is also capped by length);
3. project-listing members and id → model index keys of jobs whose record expired: they live in other
   slots than the job, so no script could expire them with it. Only members created more than
   ``record_ttl`` ago are looked at, so the cost follows what expired, not what is kept.
"""

from __future__ import annotations

import time
from typing import Any

from foundation.queue import keys
from foundation.queue.redis.scripts import Scripts

__all__ = ["RedisRetention"]

# Expired project-listing members handled per project per run, in pages: bounds one run's work.
_PAGE = 500
_MAX_PER_PROJECT = 20_000


class RedisRetention:
    def __init__(self, client: Any, scripts: Scripts, *, record_ttl_s: float, consumer_idle_s: float) -> None:
        self._r = client
        self._scripts = scripts
        self.record_ttl_ms = max(1, int(record_ttl_s * 1000))
        self.consumer_idle_ms = max(1, int(consumer_idle_s * 1000))

    def purge(self) -> int:
        """One retention pass; how many consumers, feed entries, listing members and index keys went."""
        removed = 0
        cutoff_ms = int(time.time() * 1000) - self.record_ttl_ms
        for model in sorted(self._r.smembers(keys.MODELS)):
            removed += self._scripts.remove_idle_consumers(model, self.consumer_idle_ms)
            removed += int(self._r.xtrim(keys.events_stream(model), minid=f"{max(0, cutoff_ms)}-0", approximate=False))
        for name in self._r.scan_iter(match=keys.PROJECT_JOBS_PATTERN, count=1000, _type="zset"):
            removed += self._purge_listing(name, cutoff_ms)
        return removed

    def _purge_listing(self, name: str, cutoff_ms: int) -> int:
        """Drop members (and their index keys) of jobs created before the cutoff whose job is gone."""
        removed, offset = 0, 0
        while offset < _MAX_PER_PROJECT:
            ids: list[str] = self._r.zrangebyscore(name, "-inf", cutoff_ms, start=offset, num=_PAGE)
            if not ids:
                break
            pipe = self._r.pipeline(transaction=False)  # one GET per key: they live in different slots
            for job_id in ids:
                pipe.get(keys.job_model_index(job_id))
            models = pipe.execute()
            pipe = self._r.pipeline(transaction=False)
            for job_id, model in zip(ids, models, strict=True):
                pipe.exists(keys.job_record(model, job_id) if model else keys.job_model_index(job_id))
            alive = pipe.execute()
            gone = [job_id for job_id, live in zip(ids, alive, strict=True) if not live]
            if gone:
                pipe = self._r.pipeline(transaction=False)
                pipe.zrem(name, *gone)
                for job_id in gone:
                    pipe.delete(keys.job_model_index(job_id))
                pipe.execute()
                removed += len(gone)
            offset += len(ids) - len(gone)  # kept members stay at the front of the range
            if len(ids) < _PAGE:
                break
        return removed

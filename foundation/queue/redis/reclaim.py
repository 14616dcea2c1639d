"""The reaper of the Redis backend: jobs whose holder stopped, and records this version cannot read.

- Lapsed leases: ``XPENDING ... IDLE`` lists entries idle past the reaper's own lease; one is taken
  (``XCLAIM`` to the ``_reaper`` consumer, with the holder's lease as min idle, so the server re-checks)
  only when its idle time also passed the lease its holder claimed with, stored on the job hash
  (``lease_ms``): a worker with a shorter lease never takes a live job from one that renews on a
  longer schedule. Each job is then re-queued, ended ``canceled`` or dead-lettered
  (``redis_plans.reclaim``), atomically and only while the entry is still the reaper's.
- Running records with no lease (``sweep_unleased``): a record ``running`` on an entry that is pending
  for nobody (an acknowledgement by mistake, a write lost in a failover) would stay ``running``
  forever, since the reaper only sees pending entries. The ``running`` set of the model's pool lists
  every running record; those without a pending entry are re-queued like a lapsed lease.
- One record at a time: a record this version cannot read (``records.UnreadableRecord``) is set
  aside as a dead letter with the reason and what was stored, its entry acknowledged, and the reaper
  goes on with the other jobs. A bad record never stops reclamation or claiming.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from foundation.core.contract import Status, utcnow
from foundation.queue import keys
from foundation.queue.errors import UnreadableEntry, UnreadableRecord
from foundation.queue.policy import DeadReason
from foundation.queue.redis import plans as redis_plans
from foundation.queue.redis.entries import read_payload
from foundation.queue.redis.jobs import JobWriter
from foundation.queue.redis.scripts import Scripts

__all__ = ["Reaper"]

_PAGE = 100  # pending entries read per XPENDING call


class Reaper:
    """Reclaims one model's pool at a time; also the one place that dead-letters what cannot be read."""

    def __init__(self, client: Any, scripts: Scripts, jobs: JobWriter) -> None:
        self._r = client
        self._scripts = scripts
        self._jobs = jobs

    def reclaim_model(self, model: str, lease_ttl_s: float) -> int:
        """Re-queue (or end) the jobs of ``model`` whose lease lapsed; how many were re-queued or ended.

        ``lease_ttl_s`` (the caller's) is only the scan threshold: an entry is reclaimed once its idle
        time also passed the lease its holder claimed with (``lease_ms`` on the job hash)."""
        count, start, floor_ms = 0, "-", int(lease_ttl_s * 1000)
        while True:
            try:
                rows = self._r.xpending_range(
                    keys.job_stream(model), keys.CONSUMER_GROUP, start, "+", _PAGE, idle=floor_ms
                )
            except redis.ResponseError as e:
                if "NOGROUP" in str(e):
                    return count
                raise
            for row in rows:
                count += self._reclaim_pending(model, row["message_id"], int(row["time_since_delivered"]), floor_ms)
            if len(rows) < _PAGE:
                return count
            start = "(" + rows[-1]["message_id"]

    def _reclaim_pending(self, model: str, entry_id: str, idle_ms: int, floor_ms: int) -> int:
        """One pending entry idle past the threshold: reclaimed when its holder's own lease lapsed too."""
        stream = keys.job_stream(model)
        found = self._r.xrange(stream, entry_id, entry_id)
        if not found:
            self._scripts.drop_entry(model, entry_id)  # pending but deleted: nothing left to run
            return 0
        fields = found[0][1] or {}
        try:
            job_id = read_payload(fields, model).job_id
        except UnreadableEntry as e:
            self.dead_entry(model, entry_id, e.reason, e.job_id, fields)
            return 0
        lease_ms = self._holder_lease_ms(model, job_id, entry_id, floor_ms)
        if idle_ms < lease_ms:
            return 0  # the holder renews on its own, longer schedule
        # Take the entry only if it is still idle past the holder's lease (the server checks).
        if not self._r.xclaim(stream, keys.CONSUMER_GROUP, keys.REAPER_CONSUMER, lease_ms, [entry_id], justid=True):
            return 0  # renewed meanwhile
        return self._reclaim_entry(model, job_id, entry_id)

    def _holder_lease_ms(self, model: str, job_id: str, entry_id: str, default_ms: int) -> int:
        """The lease the job's holder claimed it with; ``default_ms`` for an entry not started yet or a
        record written before leases were stored with the claim."""
        status, entry, lease_ms = self._r.hmget(keys.job_record(model, job_id), "status", "entry", "lease_ms")
        if status != "running" or entry != entry_id or not lease_ms:
            return default_ms
        try:
            return int(lease_ms)
        except ValueError:
            return default_ms

    def _reclaim_entry(self, model: str, job_id: str, entry_id: str) -> int:
        """Re-queue (or dead-letter) the job of a lapsed entry; 1 when a job was re-queued or failed."""
        try:
            committed = self._jobs.mutate(model, job_id, lambda snap: redis_plans.reclaim(snap, entry_id))
        except UnreadableRecord as e:
            self.set_aside(model, job_id, e, entry_id)
            return 0
        if committed is None and self._jobs.snapshot_entry(model, job_id) != entry_id:
            self._scripts.drop_entry(model, entry_id)  # an orphan: its record moved on or is gone
        return 1 if committed is not None else 0

    def sweep_unleased(self, model: str) -> int:
        """Re-queue (or end) the model's ``running`` records whose entry is pending for nobody; count them."""
        count = 0
        for job_id in self._r.sscan_iter(keys.running_set(model), count=_PAGE):
            try:
                snap = self._jobs.snapshot(model, job_id)
            except UnreadableRecord as e:
                self.set_aside(model, job_id, e)
                continue
            if snap is None:
                self._r.srem(keys.running_set(model), job_id)  # no record: nothing to run
                continue
            if snap.record.status is not Status.running or (snap.entry and self._pending(model, snap.entry)):
                continue  # leased: lapsed leases are the reaper's business
            if self._jobs.mutate(model, job_id, redis_plans.sweep) is not None:
                count += 1
        return count

    def _pending(self, model: str, entry_id: str) -> bool:
        rows = self._r.xpending_range(keys.job_stream(model), keys.CONSUMER_GROUP, entry_id, entry_id, 1)
        return bool(rows)

    def dead_entry(self, model: str, entry_id: str, reason: str, job_id: str, fields: dict[str, str]) -> None:
        """Acknowledge and delete an entry that starts no job, with a dead letter saying why."""
        raw = json.dumps(fields)[:2000]
        dead = {"job_id": job_id, "model": model, "reason": reason, "entry": entry_id, "raw": raw}
        dead["at"] = utcnow().isoformat()
        self._scripts.drop_entry(model, entry_id, dead)

    def set_aside(self, model: str, job_id: str, error: UnreadableRecord, entry_id: str = "") -> None:
        """A record this version cannot read: a dead letter with the problem and the stored text; its
        entry (if any) is acknowledged so no reader meets it again. The record itself is kept as stored."""
        dead = {"job_id": job_id, "model": model, "reason": DeadReason.invalid_record.value}
        dead.update(message=error.detail, raw=error.raw[:2000], at=utcnow().isoformat())
        if entry_id:
            dead["entry"] = entry_id
        self._scripts.drop_entry(model, entry_id, dead)
        # Nobody can claim or run it any more (no reader parses it): the sweep need not look again.
        self._r.srem(keys.running_set(model), job_id)

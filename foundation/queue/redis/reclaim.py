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
  aside as a dead letter with the reason and what was stored, its entry acknowledged, its job ended
  ``failed`` (``redis_plans.set_aside``), and the reaper goes on with the other jobs. A bad record never
  stops reclamation or claiming, and never stays ``running``.
- Newer versions' records (``records.NewerRecord``, a rolling upgrade): never read, never taken. Their
  pending entries are left idle (no ``XCLAIM``), so a newer worker's reaper takes them once its lease
  passed and runs the job; an entry still idle past ``newer_record_wait_s`` had no newer reader in all
  that time, and its job ends ``failed: version_unavailable`` where its client sees it (``fail_unread``).
  Each one met is noted once per wait (``NewerNotes``) for the worker's log and metric.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from foundation.core.contract import Status, utcnow
from foundation.core.errors import ErrorCode
from foundation.queue import keys, records
from foundation.queue.errors import NewerRecord, UnreadableEntry, UnreadableRecord
from foundation.queue.newer import NewerNotes
from foundation.queue.policy import DeadReason
from foundation.queue.redis import plans as redis_plans
from foundation.queue.redis.entries import read_payload
from foundation.queue.redis.jobs import MAX_CAS_TRIES, JobWriter
from foundation.queue.redis.scripts import Scripts

__all__ = ["Reaper"]

_PAGE = 100  # pending entries read per XPENDING call
_ENDED = frozenset(s.value for s in (Status.succeeded, Status.failed, Status.canceled))


class Reaper:
    """Reclaims one model's pool at a time; also the one place that dead-letters what cannot be read,
    and that leaves (then, past ``newer_record_wait_s``, fails) what a newer version wrote."""

    def __init__(self, client: Any, scripts: Scripts, jobs: JobWriter, *, newer_record_wait_s: float = 900.0) -> None:
        self._r = client
        self._scripts = scripts
        self._jobs = jobs
        self._newer_wait_ms = int(newer_record_wait_s * 1000)
        self.newer = NewerNotes()

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
        lease_ms, record_format = self._holder_lease_ms(model, job_id, entry_id, floor_ms)
        if idle_ms < lease_ms:
            return 0  # the holder renews on its own, longer schedule
        if record_format > self._scripts.record_format:
            return self._newer_pending(model, job_id, entry_id, idle_ms, record_format=record_format, lease_ms=lease_ms)
        # Take the entry only if it is still idle past the holder's lease (the server checks).
        if not self._r.xclaim(stream, keys.CONSUMER_GROUP, keys.REAPER_CONSUMER, lease_ms, [entry_id], justid=True):
            return 0  # renewed meanwhile
        return self._reclaim_entry(model, job_id, entry_id)

    def _holder_lease_ms(self, model: str, job_id: str, entry_id: str, default_ms: int) -> tuple[int, int]:
        """The lease the job's holder claimed it with (``default_ms`` for an entry not started yet or a
        record written before leases were stored with the claim), and the record's format."""
        job = keys.job_record(model, job_id)
        status, entry, lease_ms, fmt = self._r.hmget(job, "status", "entry", "lease_ms", "format")
        record_format = records.record_format(fmt)
        if status != "running" or entry != entry_id or not lease_ms:
            return default_ms, record_format
        try:
            return int(lease_ms), record_format
        except ValueError:
            return default_ms, record_format

    def _newer_pending(
        self, model: str, job_id: str, entry_id: str, idle_ms: int, *, record_format: int, lease_ms: int
    ) -> int:
        """A lapsed pending entry of a newer version's job. Left idle for a newer reaper to take, until it
        has been idle ``newer_record_wait_s`` (and its holder's lease): then no worker of that version is
        there, and the job fails."""
        wait_ms = max(self._newer_wait_ms, lease_ms)
        if idle_ms < wait_ms:
            self.newer.note(model, job_id, record_format, failed=False, waited_s=idle_ms / 1000)
            return 0
        # Taken only if still idle that long (the server checks): a newer reaper may have just taken it.
        stream = keys.job_stream(model)
        if not self._r.xclaim(stream, keys.CONSUMER_GROUP, keys.REAPER_CONSUMER, wait_ms, [entry_id], justid=True):
            return 0
        return self.fail_newer(model, job_id, idle_ms, entry=entry_id, owned_by=keys.REAPER_CONSUMER)

    def fail_newer(
        self,
        model: str,
        job_id: str,
        waited_ms: int,
        *,
        entry: str | None,
        owned_by: str | None = None,
        unleased: bool = False,
    ) -> int:
        """End a newer version's job that waited ``waited_ms`` for a worker of its version in vain:
        ``failed: version_unavailable``, dead-lettered, its record's text otherwise kept; 1 when it ended."""
        unread = self._jobs.unread(model, job_id)
        if unread is None or unread.record_format <= self._scripts.record_format:
            return 0  # gone, or no newer version's any more: an entry the reaper took is reclaimed next pass
        if unread.status in _ENDED or (owned_by is not None and unread.entry != entry):
            if owned_by is not None and entry:
                self._scripts.drop_entry(model, entry)  # the reaper's entry starts nothing: over, or an orphan
            return 0
        wait_s = self._newer_wait_ms / 1000
        message = f"record format {unread.record_format}: no worker of that version took it in {wait_s:g} s"
        plan = redis_plans.fail_unread(unread, message, entry=entry, owned_by=owned_by, unleased=unleased)
        if not self._scripts.commit(plan).done:
            return 0  # moved meanwhile (a newer worker wrote it): the next pass looks again
        self._r.srem(keys.running_set(model), job_id)
        self.newer.note(model, job_id, unread.record_format, failed=True, waited_s=waited_ms / 1000)
        return 1

    def leave(self, model: str, job_id: str, error: NewerRecord, waited_s: float = 0.0) -> None:
        """A newer version's record met on the claim path: its entry stays pending for the claimer (no
        attempt used, nothing written); once it has been idle past the lease a newer reaper takes it."""
        self.newer.note(model, job_id, error.record_format, failed=False, waited_s=waited_s)

    def _reclaim_entry(self, model: str, job_id: str, entry_id: str) -> int:
        """Re-queue (or dead-letter) the job of a lapsed entry; 1 when a job was re-queued or failed."""
        try:
            committed = self._jobs.mutate(model, job_id, lambda snap: redis_plans.reclaim(snap, entry_id))
        except NewerRecord as e:  # written by a newer version since the scan: the reaper's now, left idle
            self.leave(model, job_id, e)
            return 0
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
            except NewerRecord as e:
                count += self._sweep_newer(model, job_id, e)
                continue
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

    def _sweep_newer(self, model: str, job_id: str, error: NewerRecord) -> int:
        """A newer version's ``running`` record: left while it is leased or younger than the wait (by its
        own ``updated_at``: it has no pending entry whose idle time could say); failed past it, unleased."""
        unread = self._jobs.unread(model, job_id)
        if unread is None or unread.status != "running" or (unread.entry and self._pending(model, unread.entry)):
            return 0  # gone, or a live claim: a newer worker holds it
        written = records.last_written(unread.raw)
        waited_ms = self._newer_wait_ms if written is None else int((utcnow() - written).total_seconds() * 1000)
        if waited_ms < self._newer_wait_ms:
            self.newer.note(model, job_id, error.record_format, failed=False, waited_s=waited_ms / 1000)
            return 0
        return self.fail_newer(model, job_id, waited_ms, entry=unread.entry or None, unleased=True)

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
        entry (if any) is acknowledged so no reader meets it again, and its job ends ``failed``."""
        dead = {"job_id": job_id, "model": model, "reason": DeadReason.invalid_record.value}
        dead["code"] = ErrorCode.record_unreadable.value
        dead.update(message=error.detail, raw=error.raw[:2000], at=utcnow().isoformat())
        if entry_id:
            dead["entry"] = entry_id
        self._scripts.drop_entry(model, entry_id, dead)
        self._end_set_aside(model, job_id)
        # Nobody can claim or run it any more (no reader parses it): the sweep need not look again.
        self._r.srem(keys.running_set(model), job_id)

    def _end_set_aside(self, model: str, job_id: str) -> None:
        """End a set-aside job ``failed`` (``redis_plans.set_aside``), so no client sees it ``running`` or
        ``queued`` for ever; again after a lost race with another writer, never over an ended one."""
        for _ in range(MAX_CAS_TRIES):
            try:
                unread = self._jobs.unread(model, job_id)
            except UnreadableRecord:  # its hash's own numbers are broken: the dead letter says so
                return
            if unread is None or unread.status in _ENDED:
                return
            if self._scripts.commit(redis_plans.set_aside(unread)).kind != "conflict":
                return

"""Redis Streams backend: one stream and consumer group per model pool, leases as PEL idle time.

See ``docs/queue-protocol.md`` for keys, payloads and rules. In short:

- enqueue: ``SET NX`` the idempotency key (if any) → write the id → model index and the project listing
  → ``commit.lua`` creates the record and adds the stream entry atomically (a no-op if it exists).
- claim: move due retries back into the streams, pick a model (``ordering``), ``XREADGROUP`` one entry,
  then ``commit.lua`` turns the record ``running`` with ``attempt + 1`` (the fencing token).
- lease: the entry's idle time in the PEL; ``renew`` resets it with ``XCLAIM ... JUSTID`` (fenced).
  ``XAUTOCLAIM`` (min idle = lease TTL) finds lapsed leases, which are re-queued or dead-lettered.
- every write after the claim is fenced: refused unless the record is ``running`` at the claim's
  attempt with the claim's entry.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
from pydantic import ValidationError
from redis.cluster import RedisCluster

from worker.core.contract import ErrorInfo, GenerationRecord, Stage, Status, utcnow
from worker.core.errors import IdempotencyConflict, UnknownJob
from worker.queue import keys, records
from worker.queue.base import Claim, EnqueueResult, Outcome
from worker.queue.entries import UnreadableEntry, encode_payload, read_payload
from worker.queue.ordering import order_models
from worker.queue.redis_jobs import MAX_CAS_TRIES, JobWriter, Snapshot, dead_plan, holds, plan_change, split_token
from worker.queue.redis_reads import RedisReads
from worker.queue.redis_scripts import Plan, Scripts

__all__ = ["RedisQueue"]


class RedisQueue(RedisReads):
    """``JobQueue`` on Redis (standalone now; every atomic step stays in one Cluster slot)."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster | str,
        *,
        lease_ttl_s: float = 30.0,
        max_attempts: int = 3,
        retry_backoff_s: float = 2.0,
        starve_after_s: float = 60.0,
        events_maxlen: int = 100_000,
        block_slice_s: float = 0.25,
    ) -> None:
        if isinstance(client, str):
            client = redis.Redis.from_url(client, decode_responses=True, encoding_errors="replace")
        if not client.get_encoder().decode_responses:
            raise ValueError("RedisQueue needs a client made with decode_responses=True")
        self._scripts = Scripts(client, events_maxlen)
        self._jobs = JobWriter(client, self._scripts)
        super().__init__(client, self._scripts)
        self.lease_ttl_s = lease_ttl_s
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s  # the worker's backoff base; retry() takes the delay
        self.starve_after_s = starve_after_s
        self._block_slice_s = block_slice_s
        self._lock = threading.Lock()
        self._groups: set[str] = set()
        self._last_reclaim: dict[str, float] = {}
        self._rotation = 0

    # ------------------------------------------------------------------------------------ API side
    def enqueue(
        self, record: GenerationRecord, *, idempotency_key: str | None = None, request_hash: str | None = None
    ) -> EnqueueResult:
        record = records.enqueued(record, max_attempts=self.max_attempts)
        replayed = False
        if idempotency_key is not None:
            owner_id = self._reserve_idempotency(record, idempotency_key, request_hash or "")
            if owner_id != record.id:
                replayed = True
                existing = self.get(owner_id)
                if existing is not None:
                    return EnqueueResult(existing, replayed=True)
                # The first request stopped between its key and its record: finish it under its id.
                record = record.model_copy(update={"id": owner_id})
        pipe = self._r.pipeline(transaction=False)
        pipe.set(keys.job_model_index(record.id), record.model)
        pipe.zadd(keys.project_jobs(record.project), {record.id: record.created_at.timestamp() * 1000})
        pipe.sadd(keys.MODELS, record.model)
        pipe.execute()
        self._remember_model(record.id, record.model)
        plan = Plan(
            job_id=record.id,
            model=record.model,
            attempt=0,
            create=True,
            record=record,
            status=Status.queued,
            payload=encode_payload(record.id, record.model),
            event="enqueued",
        )
        reply = self._scripts.commit(plan)
        if reply.kind == "exists":
            stored = self.get(record.id)
            assert stored is not None
            return EnqueueResult(stored, replayed=replayed)
        return EnqueueResult(record, replayed=replayed)

    def _reserve_idempotency(self, record: GenerationRecord, key: str, request_hash: str) -> str:
        """The id the key maps to: this record's when the key is new, else the first request's."""
        name = keys.idempotency(record.project, key)
        mine = json.dumps({"job_id": record.id, "request_hash": request_hash})
        while True:
            if self._r.set(name, mine, nx=True, ex=keys.IDEMPOTENCY_TTL_S):
                return record.id
            stored = self._r.get(name)
            if stored is None:
                continue  # expired between the two calls
            owner = json.loads(stored)
            if owner["request_hash"] != request_hash:
                raise IdempotencyConflict(owner["job_id"])
            return str(owner["job_id"])

    def cancel(self, job_id: str) -> GenerationRecord:
        model = self._model_of(job_id)
        if model is None:
            raise UnknownJob(job_id)

        def build(snap: Snapshot) -> Plan | None:
            rec = snap.record
            if rec.terminal or (rec.status is Status.running and rec.cancel_requested):
                return None
            if rec.status is Status.queued:
                new = records.canceled(rec)
                return plan_change(
                    snap, new, status=Status.canceled, ack=snap.entry or None, undelay=True, event="canceled"
                )
            return plan_change(snap, records.with_cancel_flag(rec), event="cancel_requested")

        self._jobs.mutate(model, job_id, build)
        current = self.get(job_id)
        if current is None:
            raise UnknownJob(job_id)
        return current

    # ------------------------------------------------------------------------------------ worker side
    def claim(
        self, worker_id: str, models: Sequence[str], *, prefer: Sequence[str] = (), block_s: float = 0.0
    ) -> Claim | None:
        hosted = list(dict.fromkeys(models))
        if not hosted:
            return None
        self._ensure_groups(hosted)
        deadline = time.monotonic() + block_s
        while True:
            self._reclaim_due(hosted)  # throttled: at most twice per lease TTL per model
            ages, cursors = self._waiting_ages(hosted)
            for model in order_models(ages, prefer, self.starve_after_s):
                claim = self._claim_from(worker_id, model, block_ms=0)
                if claim is not None:
                    return claim
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            block_ms = max(1, int(min(remaining, self._block_slice_s) * 1000))
            if len(hosted) == 1 or isinstance(self._r, RedisCluster):
                # Block on one stream at a time (a multi-stream read would span Cluster slots),
                # rotating so a job of any hosted model is seen within a few slices.
                self._rotation = (self._rotation + 1) % len(hosted)
                claim = self._claim_from(worker_id, hosted[self._rotation], block_ms=block_ms)
                if claim is not None:
                    return claim
            else:
                # One server: wait on every hosted stream at once, from where the group stood at the
                # scan, so a job of any model wakes the worker at once (a rotation would leave it
                # blocked on another model's stream for up to a slice). The read only wakes; the
                # next round claims through the group.
                self._r.xread({keys.job_stream(m): cursors[m] for m in hosted}, count=1, block=block_ms)

    def renew(self, claim: Claim) -> bool:
        entry, consumer = split_token(claim.token)
        ok = self._scripts.renew(
            keys=[keys.job_record(claim.model, claim.job_id), keys.job_stream(claim.model)],
            args=[keys.CONSUMER_GROUP, consumer, claim.attempt, entry],
        )
        return bool(int(ok))

    def progress(self, claim: Claim, stage: Stage, progress: float) -> bool:
        def build(snap: Snapshot) -> Plan | None:
            if not holds(snap, claim):
                return None
            return plan_change(snap, records.with_progress(snap.record, stage, progress), fence=claim)

        return self._jobs.mutate(claim.model, claim.job_id, build) is not None

    def cancel_requested(self, job_id: str) -> bool:
        model = self._model_of(job_id)
        if model is None:
            return False
        return bool(self._r.hget(keys.job_record(model, job_id), "cancel") == "1")

    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        def build(snap: Snapshot) -> Plan | None:
            if not holds(snap, claim):
                return None
            new = records.finished(snap.record, outcome)
            reason = outcome.status.value + (f": {outcome.error.code.value}" if outcome.error else "")
            return plan_change(snap, new, status=outcome.status, fence=claim, ack=snap.entry, event=reason)

        return self._jobs.mutate(claim.model, claim.job_id, build) is not None

    def retry(self, claim: Claim, error: ErrorInfo, *, delay_s: float) -> bool:
        def build(snap: Snapshot) -> Plan | None:
            if not holds(snap, claim):
                return None
            if snap.record.attempt - snap.released >= snap.record.max_attempts:
                return dead_plan(snap, error, fence=claim, reason="out of attempts")
            new = records.requeued(snap.record, error=error)
            plan = plan_change(snap, new, status=Status.queued, fence=claim, ack=snap.entry)
            plan.event = f"retry: {error.code.value}"
            if delay_s > 0:
                plan.delay_until_ms = int((time.time() + delay_s) * 1000)
            else:
                plan.payload = encode_payload(claim.job_id, claim.model)
            return plan

        return self._jobs.mutate(claim.model, claim.job_id, build) is not None

    def release(self, claim: Claim) -> bool:
        def build(snap: Snapshot) -> Plan | None:
            if not holds(snap, claim):
                return None
            plan = plan_change(snap, records.requeued(snap.record), status=Status.queued, fence=claim, ack=snap.entry)
            plan.payload = encode_payload(claim.job_id, claim.model)
            plan.released_incr = 1  # a drain is not a failure: it does not use up an attempt
            plan.event = "released"
            return plan

        return self._jobs.mutate(claim.model, claim.job_id, build) is not None

    def reclaim_expired(self) -> int:
        return sum(self._reclaim_model(m) for m in sorted(self._r.smembers(keys.MODELS)))

    def close(self) -> None:
        self._r.close()

    # ------------------------------------------------------------------------------------ claiming
    def _claim_from(self, worker_id: str, model: str, *, block_ms: int) -> Claim | None:
        """Read entries of one model until one starts a job or the stream has nothing new."""
        while True:
            reply = self._r.xreadgroup(
                keys.CONSUMER_GROUP, worker_id, {keys.job_stream(model): ">"}, count=1, block=block_ms or None
            )
            entries = _entries_of(reply)
            if not entries:
                return None
            entry_id, fields = entries[0]
            claim = self._start(worker_id, model, entry_id, fields)
            if claim is not None:
                return claim
            block_ms = 0

    def _start(self, worker_id: str, model: str, entry_id: str, fields: dict[str, str]) -> Claim | None:
        """Turn a delivered entry into a running attempt, or drop it (dead-lettered when unreadable)."""
        try:
            payload = read_payload(fields, model)
        except UnreadableEntry as e:
            self._dead_entry(model, entry_id, e.reason, e.job_id, fields)
            return None
        for _ in range(MAX_CAS_TRIES):
            try:
                snap = self._jobs.snapshot(model, payload.job_id)
            except ValidationError:
                self._dead_entry(model, entry_id, "record is not a valid GenerationRecord", payload.job_id, fields)
                return None
            if snap is None:
                self._dead_entry(model, entry_id, "no record for this job", payload.job_id, fields)
                return None
            if snap.entry != entry_id or snap.record.status is not Status.queued:
                self._scripts.drop_entry(model, entry_id)  # canceled or superseded meanwhile
                return None
            new = records.started(snap.record)
            plan = plan_change(snap, new, status=Status.running, event="claimed")
            plan.event = f"claimed by {worker_id}"
            reply = self._scripts.commit(plan)
            if reply.kind == "ok":
                return Claim(payload.job_id, model, new.attempt, new, token=f"{entry_id}|{worker_id}")
        raise RuntimeError(f"job {payload.job_id}: too many concurrent writers")

    def _dead_entry(self, model: str, entry_id: str, reason: str, job_id: str, fields: dict[str, str]) -> None:
        raw = json.dumps(fields)[:2000]
        dead = {"job_id": job_id, "model": model, "reason": reason, "entry": entry_id, "raw": raw}
        dead["at"] = utcnow().isoformat()
        self._scripts.drop_entry(model, entry_id, dead)

    def _waiting_ages(self, models: list[str]) -> tuple[dict[str, float], dict[str, str]]:
        """Age (s) of the oldest waiting entry of each model with work (due retries promoted first),
        and each model's group cursor (its last-delivered entry id) at the scan."""
        ages: dict[str, float] = {}
        cursors: dict[str, str] = {}
        for model in models:
            now_ms, oldest, due, cursor = self._scripts.scan(
                keys=[keys.job_stream(model), keys.delayed_zset(model)], args=[keys.CONSUMER_GROUP]
            )
            if int(due):
                self._promote_due(model, int(now_ms))
                now_ms, oldest, due, cursor = self._scripts.scan(
                    keys=[keys.job_stream(model), keys.delayed_zset(model)], args=[keys.CONSUMER_GROUP]
                )
            if oldest:
                ages[model] = (int(now_ms) - int(str(oldest).split("-")[0])) / 1000
            cursors[model] = str(cursor)
        return ages, cursors

    def _promote_due(self, model: str, now_ms: int) -> None:
        """Move retries whose backoff is over from the delayed zset back to the stream."""
        for job_id in self._r.zrangebyscore(keys.delayed_zset(model), "-inf", now_ms, start=0, num=100):

            def build(snap: Snapshot, job_id: str = job_id) -> Plan | None:
                if snap.record.status is not Status.queued or snap.entry:
                    return None
                plan = Plan(job_id=job_id, model=model, attempt=snap.record.attempt, rev=snap.rev, undelay=True)
                plan.payload = encode_payload(job_id, model)
                return plan

            if self._jobs.mutate(model, job_id, build) is None:
                self._r.zrem(keys.delayed_zset(model), job_id)  # record gone or moved on: stale member

    def _ensure_groups(self, models: list[str]) -> None:
        for model in models:
            if model in self._groups:
                continue
            try:
                self._r.xgroup_create(keys.job_stream(model), keys.CONSUMER_GROUP, id="0", mkstream=True)
            except redis.ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise
            self._r.sadd(keys.MODELS, model)
            with self._lock:
                self._groups.add(model)

    # ------------------------------------------------------------------------------------ reclaiming
    def _reclaim_due(self, models: list[str]) -> None:
        """Reclaim lapsed leases of the models a worker claims from, at most twice per lease TTL."""
        now = time.monotonic()
        for model in models:
            if now - self._last_reclaim.get(model, 0.0) >= self.lease_ttl_s / 2:
                self._last_reclaim[model] = now
                self._reclaim_model(model)

    def _reclaim_model(self, model: str) -> int:
        count, cursor = 0, "0-0"
        min_idle_ms = int(self.lease_ttl_s * 1000)
        while True:
            try:
                reply = self._r.xautoclaim(
                    keys.job_stream(model), keys.CONSUMER_GROUP, keys.REAPER_CONSUMER, min_idle_ms, cursor, count=100
                )
            except redis.ResponseError as e:
                if "NOGROUP" in str(e):
                    return count
                raise
            cursor = str(reply[0])
            for entry_id, fields in reply[1]:
                count += self._reclaim_entry(model, entry_id, fields or {})
            if cursor == "0-0":
                return count

    def _reclaim_entry(self, model: str, entry_id: str, fields: dict[str, str]) -> int:
        """Re-queue (or dead-letter) the job of a lapsed entry; 1 when a job was re-queued or failed."""
        try:
            job_id = read_payload(fields, model).job_id
        except UnreadableEntry as e:
            self._dead_entry(model, entry_id, e.reason, e.job_id, fields)
            return 0

        def build(snap: Snapshot) -> Plan | None:
            rec = snap.record
            if snap.entry != entry_id or rec.terminal:
                return None
            if rec.status is Status.queued:  # its claimer stopped between XREADGROUP and the start
                plan = plan_change(snap, rec, ack=entry_id)
            elif rec.cancel_requested:
                plan = plan_change(snap, records.finished(rec, Outcome(status=Status.canceled)), status=Status.canceled)
                plan.event, plan.ack = "canceled: lease lapsed", entry_id
                plan.owned_by = keys.REAPER_CONSUMER
                return plan
            elif rec.attempt - snap.released >= rec.max_attempts:
                plan = dead_plan(snap, records.worker_lost(rec.attempt), fence=None, reason="worker_lost")
            else:
                plan = plan_change(snap, records.requeued(rec), status=Status.queued, ack=entry_id)
                plan.event = "lease_expired"
            plan.owned_by = keys.REAPER_CONSUMER
            if plan.status is not Status.failed:
                plan.payload = encode_payload(job_id, model)
            return plan

        committed = self._jobs.mutate(model, job_id, build)
        if committed is None and self._jobs.snapshot_entry(model, job_id) != entry_id:
            self._scripts.drop_entry(model, entry_id)  # an orphan: its record moved on or is gone
        return 1 if committed is not None else 0

    # ------------------------------------------------------------------------------------ plumbing


def _entries_of(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """Entries of a one-stream ``XREADGROUP`` reply (RESP2, the client's default protocol)."""
    if not reply:
        return []
    return [(eid, fields or {}) for eid, fields in reply[0][1]]

"""Redis Streams backend: one stream and consumer group per model pool, leases as PEL idle time.

See ``docs/queue-protocol.md`` for keys, payloads and rules. In short:

- enqueue: ``SET NX`` the idempotency key (if any) → write the id → model index and the project listing
  → ``commit.lua`` creates the record and adds the stream entry atomically (a no-op if it exists).
- claim: move due retries back into the streams, pick a model (``ordering``; a worker of one model
  skips the scan), ``claim.lua`` delivers one entry and reads its job in the same call, then
  ``commit.lua`` turns the record ``running`` with ``attempt + 1`` (the fencing token). Idle, a
  worker blocks on the stream(s) and claims from the one that woke it.
- lease: the entry's idle time in the PEL; ``renew`` resets it with ``XCLAIM ... JUSTID`` (fenced).
  ``redis_reclaim.Reaper`` finds leases lapsed past their holder's own TTL (stored with the claim) and
  re-queues or dead-letters their jobs.
- every write after the claim is fenced: refused unless the record is ``running`` at the claim's
  attempt with the claim's entry. The holder plans it from the state its own last commit left
  (``redis_jobs``), so progress and finish cost one call each (the progress note goes in the commit).

Each change is one named plan of ``redis_plans``; the reads live in ``redis_reads.RedisReads``, which
the queue holds and answers read calls through. Every public method translates "Redis unreachable"
into ``BackendUnavailable`` (``unavailable.redis_unavailable``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from foundation.core.contract import ErrorInfo, GenerationRecord, Stage, Status
from foundation.core.errors import BackendUnavailable, IdempotencyConflict, UnknownJob
from foundation.core.media import Preview
from foundation.queue import keys, records
from foundation.queue.base import (
    Backlog,
    Claim,
    DeadLetter,
    EnqueueResult,
    Event,
    JobPage,
    NewerRecordMet,
    Outcome,
    ProgressNote,
    ProgressWrite,
    WorkerHeartbeat,
)
from foundation.queue.errors import NewerRecord, NotDurable, ProjectQueueFull, UnreadableEntry, UnreadableRecord
from foundation.queue.fairness import FairShare
from foundation.queue.ordering import order_models
from foundation.queue.policy import DeadReason, out_of_attempts
from foundation.queue.redis import plans as redis_plans
from foundation.queue.redis.durability import Durability
from foundation.queue.redis.entries import read_payload
from foundation.queue.redis.jobs import MAX_CAS_TRIES, JobWriter
from foundation.queue.redis.plans import Plan, Snapshot, holds, split_token
from foundation.queue.redis.reads import RedisReads
from foundation.queue.redis.reclaim import Reaper
from foundation.queue.redis.retention import RedisRetention
from foundation.queue.redis.scripts import Delivery, Due, Idle, Reply, Scripts, Started
from foundation.queue.unavailable import redis_unavailable

__all__ = ["RedisQueue"]


class RedisQueue:
    """``JobQueue`` on Redis (one server, Sentinel or Cluster: every atomic step stays in one slot)."""

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
        durability: Durability | None = None,
        record_ttl_s: float = keys.RECORD_TTL_S,
        consumer_idle_s: float = 3600.0,
        newer_record_wait_s: float = 900.0,
        record_format: int = records.RECORD_FORMAT,
        fair: FairShare | None = None,
    ) -> None:
        if isinstance(client, str):
            client = redis.Redis.from_url(client, decode_responses=True, encoding_errors="replace")
        if not client.get_encoder().decode_responses:
            raise ValueError("RedisQueue needs a client made with decode_responses=True")
        self._r: Any = client  # redis-py's command stubs are loose; replies are read as decoded str
        # Asked once: RedisCluster's isinstance check goes through typing's Protocol machinery.
        self._on_cluster = isinstance(client, RedisCluster)
        self._scripts = Scripts(
            client,
            events_maxlen,
            durability or Durability(),
            record_ttl_ms=max(1, int(record_ttl_s * 1000)),
            record_format=record_format,  # a test may open two versions of the queue in one process
            fair=fair,
        )
        self.fair = self._scripts.fair  # fair share by project per pool (lua/fair.lua), or plain FIFO
        self._retention = RedisRetention(
            client, self._scripts, record_ttl_s=record_ttl_s, consumer_idle_s=consumer_idle_s
        )
        self._jobs = JobWriter(client, self._scripts)
        self._reaper = Reaper(client, self._scripts, self._jobs, newer_record_wait_s=newer_record_wait_s)
        self.reads = RedisReads(client, self._scripts)
        self.lease_ttl_s = lease_ttl_s
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s  # the worker's backoff base; retry() takes the delay
        self.starve_after_s = starve_after_s
        self._block_slice_s = block_slice_s
        self._lock = threading.Lock()
        self._groups: set[str] = set()
        self._last_reclaim: dict[str, float] = {}
        self._claim_reclaims = 0  # re-queued by the claim path, reported by the next reclaim_expired
        self._rotation = 0

    @property
    def durability(self) -> Durability:
        """What each commit waits for (``queue.wait_replicas`` unset: settled by asking the server once)."""
        return self._scripts.durability()

    @property
    def record_format(self) -> int:
        """The record format this queue writes, the newest it reads (``records.RECORD_FORMAT`` but in tests)."""
        return self._scripts.record_format

    # ------------------------------------------------------------------------------------ reads
    def get(self, job_id: str) -> GenerationRecord | None:
        return self.reads.get(job_id)

    def list_jobs(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> tuple[list[GenerationRecord], str | None]:
        return self.reads.list_jobs(project, limit=limit, cursor=cursor, oldest_first=oldest_first)

    def list_page(
        self, project: str, *, limit: int = 20, cursor: str | None = None, oldest_first: bool = False
    ) -> JobPage:
        return self.reads.list_page(project, limit=limit, cursor=cursor, oldest_first=oldest_first)

    def depth(self, model: str) -> int:
        return self.reads.depth(model)

    def position(self, job_id: str) -> int | None:
        return self.reads.position(job_id)

    @redis_unavailable
    def backlog(self, model: str) -> Backlog:
        scan = self._scripts.scan(model)  # the oldest waiting entry, or parked job when the stream has none
        oldest = (scan.now_ms - int(scan.oldest.split("-")[0])) / 1000 if scan.oldest else None
        return Backlog(projects=int(self._r.zcard(keys.fair_projects(model))), oldest_age_s=oldest)

    def live_workers(self) -> list[WorkerHeartbeat]:
        return self.reads.live_workers()

    def heartbeat(self, beat: WorkerHeartbeat, *, ttl_s: float) -> None:
        self.reads.heartbeat(beat, ttl_s=ttl_s)

    def events(self, job_id: str | None = None, *, after: str | None = None, limit: int = 1000) -> list[Event]:
        return self.reads.events(job_id, after=after, limit=limit)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return self.reads.dead_letters(limit)

    def progress_notes(self, job_id: str, *, after: str | None = None, limit: int = 1000) -> list[ProgressNote]:
        return self.reads.progress_notes(job_id, after=after, limit=limit)

    # ------------------------------------------------------------------------------------ API side
    @redis_unavailable
    def enqueue(
        self, record: GenerationRecord, *, idempotency_key: str | None = None, request_hash: str | None = None
    ) -> EnqueueResult:
        record = records.enqueued(record, max_attempts=self.max_attempts, idempotency_key=idempotency_key)
        replayed = False
        if idempotency_key is not None:
            owner_id = self._reserve_idempotency(record, idempotency_key, request_hash or "")
            if owner_id != record.id:
                replayed = True
                existing = self.reads.get(owner_id)
                if existing is not None:
                    if self.durability.enabled:
                        # The first request may have answered 503 (not confirmed durable): this 202
                        # must not come before the replicas hold the job ('exists' writes, then waits).
                        self._scripts.create(existing)
                    return EnqueueResult(existing, replayed=True)
                # The first request stopped between its key and its record: finish it under its id.
                record = record.model_copy(update={"id": owner_id})
        index = [
            ("SET", keys.job_model_index(record.id), record.model),
            ("ZADD", keys.project_jobs(record.project), record.created_at.timestamp() * 1000, record.id),
            ("SADD", keys.MODELS, record.model),
        ]
        if self._on_cluster:
            # Other slots than the job's: a cluster pipeline may send them after the commit, and the
            # index must come first (a record is found by its id through it).
            pipe = self._r.pipeline(transaction=False)
            for command in index:
                pipe.execute_command(*command)
            pipe.execute()
            index = []
        self.reads.remember_model(record.id, record.model)
        created = self._scripts.create(record, before=index)
        if created.kind == "full":
            self._refused(record, idempotency_key)
        if created.kind == "exists":
            stored = self.reads.get(record.id)
            assert stored is not None
            return EnqueueResult(stored, replayed=replayed)
        return EnqueueResult(record, replayed=replayed)

    def _refused(self, record: GenerationRecord, idempotency_key: str | None) -> None:
        """A create past its project's ``max_queued``: undo what came before the commit (the key, the
        index writes), so the same create is accepted once room frees up, then raise."""
        if idempotency_key is not None:
            name = keys.idempotency(record.project, idempotency_key)
            stored = self._r.get(name)
            if stored is not None and json.loads(stored)["job_id"] == record.id:
                self._r.delete(name)
        pipe = self._r.pipeline(transaction=False)
        pipe.zrem(keys.project_jobs(record.project), record.id)
        pipe.delete(keys.job_model_index(record.id))
        pipe.execute()
        raise ProjectQueueFull(record.project, record.model, self.fair.max_queued_of(record.project))

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

    @redis_unavailable
    def cancel(self, job_id: str) -> GenerationRecord:
        model = self.reads.model_of(job_id)
        if model is None:
            raise UnknownJob(job_id)

        def build(snap: Snapshot) -> Plan | None:
            rec = snap.record
            if rec.terminal or (rec.status is Status.running and rec.cancel_requested):
                return None
            if rec.status is Status.queued:
                return redis_plans.cancel_queued(snap)
            return redis_plans.cancel_flag(snap)

        self._jobs.mutate(model, job_id, build)
        current = self.reads.get(job_id)
        if current is None:
            raise UnknownJob(job_id)
        return current

    @redis_unavailable
    def delete(self, job_id: str) -> GenerationRecord:
        model = self.reads.model_of(job_id)
        rec = self.reads.get(job_id) if model is not None else None
        if model is None or rec is None:
            raise UnknownJob(job_id)
        if not rec.terminal:  # a terminal record never changes again: no race between this check and the DELs
            return rec
        if rec.idempotency_key is not None:  # first, so a create repeated with it never finds a half-deleted job
            name = keys.idempotency(rec.project, rec.idempotency_key)
            stored = self._r.get(name)
            if stored is not None and json.loads(stored)["job_id"] == job_id:
                self._r.delete(name)
        job = keys.job_record(model, job_id)
        self._r.delete(job, keys.job_events_of(job), keys.job_progress_of(job))  # one slot: the model's
        # Other slots, one key each. Left behind by a crash here, they point at no record: readers skip them
        # and the retention sweep removes them (foundation/queue/redis/retention.py).
        pipe = self._r.pipeline(transaction=False)
        pipe.zrem(keys.project_jobs(rec.project), job_id)
        pipe.delete(keys.job_model_index(job_id))
        pipe.execute()
        return rec

    # ------------------------------------------------------------------------------------ worker side
    @redis_unavailable
    def claim(
        self, worker_id: str, models: Sequence[str], *, prefer: Sequence[str] = (), block_s: float = 0.0
    ) -> Claim | None:
        hosted = list(dict.fromkeys(models))
        if not hosted:
            return None
        self._ensure_groups(hosted)
        deadline = time.monotonic() + block_s
        if self._on_cluster and len(hosted) > 1:
            return self._claim_rotating(worker_id, hosted, prefer, deadline)
        # Waiting, every hosted stream at once, the preferred (resident) models first: after an idle
        # wait the new entries are seconds old at most, so none starves and the order is order_models'.
        waiting = [m for m in hosted if m in prefer] + [m for m in hosted if m not in prefer]
        while True:
            self._reclaim_due(hosted)  # throttled: at most twice per lease TTL per model
            claim = None
            if len(hosted) > 1:  # work already waiting goes in order_models' order (a scan first)
                ages = self._waiting_ages(hosted)
                claim = self._take(worker_id, order_models(ages, prefer, self.starve_after_s)) if ages else None
            # One model: no scan (claim.lua reports due retries). The wait is pipelined with the claim:
            # one round trip from the wake to the job (Scripts.claim).
            claim = claim or self._take(worker_id, waiting, block_ms=self._block_ms(deadline))
            if claim is not None or time.monotonic() >= deadline:
                return claim

    def _claim_rotating(
        self, worker_id: str, hosted: list[str], prefer: Sequence[str], deadline: float
    ) -> Claim | None:
        """``claim`` of several models on a Cluster: a model's keys share one slot, several models'
        may not, so no call spans two models. Waits on one stream at a time, rotating, so a job of
        any hosted model is seen within a few slices."""
        while True:
            self._reclaim_due(hosted)
            ages = self._waiting_ages(hosted)
            for model in order_models(ages, prefer, self.starve_after_s):
                claim = self._take(worker_id, [model])
                if claim is not None:
                    return claim
            block_ms = self._block_ms(deadline)
            if block_ms <= 0:
                return None
            self._rotation = (self._rotation + 1) % len(hosted)
            claim = self._take(worker_id, [hosted[self._rotation]], block_ms=block_ms)
            if claim is not None:
                return claim

    @redis_unavailable
    def renew(self, claim: Claim) -> bool:
        entry, consumer = split_token(claim.token)
        return self._scripts.renew(claim.model, claim.job_id, consumer=consumer, attempt=claim.attempt, entry=entry)

    def progress(self, claim: Claim, stage: Stage, progress: float) -> bool:
        return self.write_progress(claim, stage, progress).accepted

    @redis_unavailable
    def write_progress(
        self,
        claim: Claim,
        stage: Stage,
        progress: float,
        *,
        passed: Sequence[Stage] = (),
        preview: Preview | None = None,
    ) -> ProgressWrite:
        found: list[bool] = []  # the cancel flag of each snapshot planned from; the last one committed

        def build(snap: Snapshot) -> Plan | None:
            if not holds(snap, claim):
                return None
            found.append(snap.record.cancel_requested)
            new = records.with_progress(snap.record, stage, progress)
            return redis_plans.progress(snap, new, claim, progress, passed, preview=preview)

        # A commit applies only on the rev it was planned from, so the flag it kept is the stored one.
        if self._jobs.mutate(claim.model, claim.job_id, build, held=True) is None:
            return ProgressWrite(accepted=False, cancel_requested=False)
        return ProgressWrite(accepted=True, cancel_requested=found[-1])

    @redis_unavailable
    def cancel_requested(self, job_id: str) -> bool:
        model = self.reads.model_of(job_id)
        if model is None:
            return False
        return bool(self._r.hget(keys.job_record(model, job_id), "cancel") == "1")

    @redis_unavailable
    def finish(self, claim: Claim, outcome: Outcome) -> bool:
        def build(snap: Snapshot) -> Plan | None:
            return redis_plans.finish(snap, claim, outcome) if holds(snap, claim) else None

        return self._jobs.mutate(claim.model, claim.job_id, build, held=True) is not None

    @redis_unavailable
    def retry(self, claim: Claim, error: ErrorInfo, *, delay_s: float) -> bool:
        def build(snap: Snapshot) -> Plan | None:
            if not holds(snap, claim):
                return None
            if out_of_attempts(snap.record, snap.released):
                return redis_plans.dead_letter(snap, error, DeadReason.out_of_attempts, fence=claim)
            return redis_plans.retry(snap, claim, error, delay_s=delay_s)

        return self._jobs.mutate(claim.model, claim.job_id, build, held=True) is not None

    @redis_unavailable
    def release(self, claim: Claim, *, reason: str | None = None) -> bool:
        def build(snap: Snapshot) -> Plan | None:
            return redis_plans.release(snap, claim, reason) if holds(snap, claim) else None

        return self._jobs.mutate(claim.model, claim.job_id, build, held=True) is not None

    @redis_unavailable
    def reclaim_expired(self) -> int:
        models = sorted(self._r.smembers(keys.MODELS))
        count = sum(self._reclaim_model(m) + self._reaper.sweep_unleased(m) for m in models)
        with self._lock:  # and what this process's claims re-queued since the last call
            count, self._claim_reclaims = count + self._claim_reclaims, 0
        return count

    def newer_records(self) -> list[NewerRecordMet]:
        return self._reaper.newer.take()

    @redis_unavailable
    def purge_expired(self) -> int:
        return self._retention.purge()

    def close(self) -> None:
        self._r.close()

    # ------------------------------------------------------------------------------------ claiming
    def _block_ms(self, deadline: float) -> int:
        """How long the next blocking read may wait: a slice of what is left (0: no wait at all)."""
        remaining = deadline - time.monotonic()
        return max(1, int(min(remaining, self._block_slice_s) * 1000)) if remaining > 0 else 0

    def _take(self, worker_id: str, models: Sequence[str], *, block_ms: int = 0) -> Claim | None:
        """Deliver new entries of ``models``, the first with one first (``claim.lua``), until one starts a
        job or none is left; ``block_ms`` > 0: then wait up to that long, once, for the next one."""
        idle: Idle | None = None  # the last answer that found nothing: where the wait reads from
        # claim.lua starts a plain queued job itself (one round trip to a running claim), except where
        # a start must be confirmed durable before it counts: then Python starts it and waits.
        lease_ms = None if self.durability.enabled else int(self.lease_ttl_s * 1000)
        while True:
            wait_from = idle if block_ms > 0 else None
            delivery = self._scripts.claim(models, worker_id, lease_ms=lease_ms, wake_from=wait_from, block_ms=block_ms)
            if wait_from is not None:
                block_ms = 0  # waited once: whatever follows is claimed without waiting
            if isinstance(delivery, Due):  # each due retry is promoted or dropped from the zset: this ends
                self._promote_due(delivery.model)
                continue
            if isinstance(delivery, Idle):
                if block_ms <= 0:
                    return None  # waited already, or not asked to wait
                idle = delivery
                continue
            block_ms = 0  # an entry came: what follows is not waited for
            if isinstance(delivery, Started):
                claim = self._started(worker_id, delivery)
            else:
                claim = self._start(worker_id, delivery.model, delivery.entry, delivery.fields, delivery)
            if claim is not None:
                return claim

    def _start(
        self, worker_id: str, model: str, entry_id: str, fields: dict[str, str], delivery: Delivery | None = None
    ) -> Claim | None:
        """Turn a delivered entry into a running attempt, or drop it (dead-lettered when unreadable).
        ``delivery``: the job hash as ``claim.lua`` read it with the entry (no read of its own)."""
        try:
            payload = read_payload(fields, model)
        except UnreadableEntry as e:
            self._reaper.dead_entry(model, entry_id, e.reason, e.job_id, fields)
            return None
        for _ in range(MAX_CAS_TRIES):
            try:
                if delivery is not None and delivery.record is not None:
                    d = delivery
                    snap = self._jobs.parse(d.record, d.rev, d.job_entry, d.released, d.record_format)
                else:
                    snap = self._jobs.snapshot(model, payload.job_id)
            except NewerRecord as e:
                # A newer version's job: its entry stays pending for this worker, which never starts it (no
                # attempt used); a newer worker's reaper takes it once it is idle past that worker's lease.
                self._reaper.leave(model, payload.job_id, e)
                return None
            except UnreadableRecord as e:
                self._reaper.set_aside(model, payload.job_id, e, entry_id)
                return None
            delivery = None  # read again after a lost race
            if snap is None:
                self._reaper.dead_entry(model, entry_id, DeadReason.no_record, payload.job_id, fields)
                return None
            if snap.entry != entry_id:
                self._scripts.drop_entry(model, entry_id)  # canceled or superseded meanwhile
                return None
            if snap.record.status is not Status.queued:
                # The record still points at this entry, so it is never dropped here (that would
                # leave a running job nobody holds and no reaper sees).
                return self._resumed(worker_id, model, entry_id, snap)
            new = records.started(snap.record)
            lease_ms = int(self.lease_ttl_s * 1000)
            claim = Claim(payload.job_id, model, new.attempt, new, token=f"{entry_id}|{worker_id}")
            plan = redis_plans.start(snap, new, worker_id, lease_ms=lease_ms)
            try:
                started = self._jobs.commit(snap, plan, hold=True).done
            except NotDurable:
                # Started on the primary, not confirmed: put it back without using an attempt
                # rather than run work a failover could hand to a second worker under the same token.
                with contextlib.suppress(BackendUnavailable):
                    self.release(claim, reason="claim_not_durable")
                raise
            if started:
                self.reads.remember_model(payload.job_id, model)  # its cancel polls need no index read
                return claim
        raise RuntimeError(f"job {payload.job_id}: too many concurrent writers")

    def _started(self, worker_id: str, started: Started) -> Claim | None:
        """The claim of a job ``claim.lua`` started (its record as that start wrote it), held as a
        commit of this process would leave it (``redis_jobs``)."""
        model, job_id = started.model, started.job_id
        try:
            snap = self._jobs.parse(started.record, str(started.rev), started.entry, str(started.released))
        except UnreadableRecord as e:  # the script wrote what pydantic writes: a bug, set aside as any
            self._reaper.set_aside(model, job_id, e, started.entry)
            return None
        assert snap is not None
        self._jobs.hold(job_id, snap)
        self.reads.remember_model(job_id, model)  # its cancel polls need no index read
        new = snap.record
        return Claim(job_id, model, new.attempt, new, token=f"{started.entry}|{worker_id}")

    def _resumed(self, worker_id: str, model: str, entry_id: str, snap: Snapshot) -> Claim | None:
        """A delivered entry whose job is already running on it: our own start, applied although its
        reply was lost and then moved on by another write (a cancel flag), when the entry is still
        pending for us; otherwise the job is left to the reaper, which re-queues it once the lease lapses."""
        pending = self._r.xpending_range(keys.job_stream(model), keys.CONSUMER_GROUP, entry_id, entry_id, 1)
        if snap.record.status is not Status.running or not pending or pending[0]["consumer"] != worker_id:
            return None
        rec = snap.record
        return Claim(rec.id, model, rec.attempt, rec, token=f"{entry_id}|{worker_id}")

    def _waiting_ages(self, models: list[str]) -> dict[str, float]:
        """Age (s) of the oldest waiting entry of each model with work (due retries promoted first)."""
        ages: dict[str, float] = {}
        for model, first in zip(models, self._scripts.scan_all(models), strict=True):
            scan = first
            if first.due:
                self._promote_due(model, first.now_ms)
                scan = self._scripts.scan(model)
            if scan.oldest:
                ages[model] = (scan.now_ms - int(scan.oldest.split("-")[0])) / 1000
        return ages

    def _promote_due(self, model: str, now_ms: int | None = None) -> None:
        """Move retries whose backoff is over (at ``now_ms``, the server's clock when not given) from
        the delayed zset back to the stream."""
        if now_ms is None:
            now_ms = self._scripts.scan(model).now_ms
        for job_id in self._r.zrangebyscore(keys.delayed_zset(model), "-inf", now_ms, start=0, num=100):

            def build(snap: Snapshot) -> Plan | None:
                if snap.record.status is not Status.queued or snap.entry:
                    return None
                return redis_plans.promote(snap)

            try:
                promoted = self._jobs.mutate(model, job_id, build)
            except NewerRecord:  # a newer version's retry: due all the same, for its own workers to take
                promoted = self._promote_unread(model, job_id)
            except UnreadableRecord as e:
                self._reaper.set_aside(model, job_id, e)
                promoted = None
            if promoted is None:
                self._r.zrem(keys.delayed_zset(model), job_id)  # record gone, moved on or unreadable

    def _promote_unread(self, model: str, job_id: str) -> Reply | None:
        """``promote`` of a newer version's due retry, without reading its record (``redis_plans.promote_unread``)."""
        for _ in range(MAX_CAS_TRIES):
            unread = self._jobs.unread(model, job_id)
            plan = None if unread is None else redis_plans.promote_unread(unread)
            if plan is None:
                return None
            reply = self._scripts.commit(plan)
            if reply.kind != "conflict":
                return reply if reply.done else None
        return None

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
                count = self._reclaim_model(model)
                with self._lock:
                    self._claim_reclaims += count

    def _reclaim_model(self, model: str) -> int:
        return self._reaper.reclaim_model(model, self.lease_ttl_s)

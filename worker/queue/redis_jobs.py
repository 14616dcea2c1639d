"""Reading and writing one job hash of the Redis backend: a snapshot, a plan, an optimistic commit.

Every change to a job is: read the hash (``Snapshot``), build the new record and a ``Plan`` in Python,
and let ``commit.lua`` apply it only if ``rev`` did not move meanwhile (else read again). Fencing is
checked twice: here before planning (``holds``) and in Lua at commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.core.contract import ErrorInfo, GenerationRecord, Status
from worker.queue import keys, records
from worker.queue.base import Claim
from worker.queue.redis_scripts import Plan, Reply, Scripts

__all__ = ["MAX_CAS_TRIES", "JobWriter", "Snapshot", "dead_plan", "holds", "plan_change", "split_token"]

# Optimistic check-and-set retries before giving up (a conflict means another writer won a race).
MAX_CAS_TRIES = 100


@dataclass(frozen=True)
class Snapshot:
    record: GenerationRecord
    rev: int
    entry: str
    released: int


class JobWriter:
    def __init__(self, client: Any, scripts: Scripts) -> None:
        self._r = client
        self._scripts = scripts

    def snapshot(self, model: str, job_id: str) -> Snapshot | None:
        raw, rev, entry, released = self._r.hmget(keys.job_record(model, job_id), "record", "rev", "entry", "released")
        if raw is None:
            return None
        record = GenerationRecord.model_validate_json(raw)
        return Snapshot(record, int(rev or 0), entry or "", int(released or 0))

    def snapshot_entry(self, model: str, job_id: str) -> str | None:
        return self._r.hget(keys.job_record(model, job_id), "entry")  # type: ignore[no-any-return]

    def mutate(self, model: str, job_id: str, build: Callable[[Snapshot], Plan | None]) -> Reply | None:
        """Read, plan, commit; again on a lost race. None: refused (stale claim, nothing to do, gone)."""
        for _ in range(MAX_CAS_TRIES):
            snap = self.snapshot(model, job_id)
            if snap is None:
                return None
            plan = build(snap)
            if plan is None:
                return None
            reply = self._scripts.commit(plan)
            if reply.kind == "ok":
                return reply
            if reply.kind != "conflict":
                return None
        raise RuntimeError(f"job {job_id}: too many concurrent writers")


def plan_change(
    snap: Snapshot,
    record: GenerationRecord,
    *,
    status: Status | None = None,
    fence: Claim | None = None,
    ack: str | None = None,
    undelay: bool = False,
    event: str | None = None,
) -> Plan:
    plan = Plan(
        job_id=record.id,
        model=record.model,
        attempt=record.attempt,
        rev=snap.rev,
        record=record,
        status=status,
        cancel=record.cancel_requested,
        ack=ack,
        undelay=undelay,
        event=event,
    )
    if fence is not None:
        plan.fence_attempt, plan.fence_entry = fence.attempt, split_token(fence.token)[0]
    return plan


def dead_plan(snap: Snapshot, error: ErrorInfo, *, fence: Claim | None, reason: str) -> Plan:
    plan = plan_change(snap, records.dead_lettered(snap.record, error), status=Status.failed, fence=fence)
    plan.ack, plan.event = snap.entry, f"failed: {error.code.value} ({reason})"
    plan.dead, plan.dead_code, plan.dead_message = reason, error.code.value, error.message
    return plan


def split_token(token: str) -> tuple[str, str]:
    entry, _, consumer = token.partition("|")
    return entry, consumer


def holds(snap: Snapshot, claim: Claim) -> bool:
    """The fencing rule, checked in Python before planning and again in Lua by ``commit.lua``."""
    rec = snap.record
    return rec.status is Status.running and rec.attempt == claim.attempt and snap.entry == split_token(claim.token)[0]

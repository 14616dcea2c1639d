"""Reading and writing one job hash of the Redis backend: a snapshot, a plan, an optimistic commit.

Every change to a job is: read the hash (``Snapshot``), build the new record and its ``Plan`` in
Python (``redis_plans``), and let ``commit.lua`` apply it only if ``rev`` did not move meanwhile
(else read again). Fencing is checked twice: before planning (``redis_plans.holds``) and in Lua.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.queue import keys, records
from worker.queue.redis_plans import Plan, Snapshot
from worker.queue.redis_scripts import Reply, Scripts

__all__ = ["MAX_CAS_TRIES", "JobWriter"]

# Optimistic check-and-set retries before giving up (a conflict means another writer won a race).
MAX_CAS_TRIES = 100


class JobWriter:
    def __init__(self, client: Any, scripts: Scripts) -> None:
        self._r = client
        self._scripts = scripts

    def snapshot(self, model: str, job_id: str) -> Snapshot | None:
        """The job as stored; None when it has no record, ``records.UnreadableRecord`` when this
        version cannot read it."""
        raw, rev, entry, released = self._r.hmget(keys.job_record(model, job_id), "record", "rev", "entry", "released")
        if raw is None:
            return None
        record = records.parse(raw)
        try:
            return Snapshot(record, int(rev or 0), entry or "", int(released or 0))
        except ValueError:
            raise records.UnreadableRecord(raw, f"job hash: rev {rev!r}, released {released!r}") from None

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
            if reply.done:
                return reply
            if reply.kind != "conflict":
                return None
        raise RuntimeError(f"job {job_id}: too many concurrent writers")

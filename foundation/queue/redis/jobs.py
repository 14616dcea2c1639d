"""Reading and writing one job hash of the Redis backend: a snapshot, a plan, an optimistic commit.

Every change to a job is: read the hash (``Snapshot``), build the new record and its ``Plan`` in
Python (``redis_plans``), and let ``commit.lua`` apply it only if ``rev`` did not move meanwhile
(else read again). Fencing is checked twice: before planning (``redis_plans.holds``) and in Lua.

A job this process holds (claimed, running) skips the read: every commit of the holder leaves a
hash whose whole state the holder knows (the record it sent, ``rev + 1``, the entry the script
answers), so the next write of the claim is planned from that state (``held``). Whatever another
writer changed meanwhile (a cancel flag) moved ``rev``: the commit answers ``conflict`` and the
write is planned again from a fresh read, so a remembered state can cost a retry, never a lost
change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from foundation.core.contract import Status
from foundation.queue import keys, records
from foundation.queue.redis.plans import Plan, Snapshot, Unread
from foundation.queue.redis.scripts import Reply, Scripts

__all__ = ["MAX_CAS_TRIES", "JobWriter"]

# Optimistic check-and-set retries before giving up (a conflict means another writer won a race).
MAX_CAS_TRIES = 100

# Held jobs whose state is remembered; past this (claims abandoned without an ending), start over.
_HELD_MAX = 1024


class JobWriter:
    def __init__(self, client: Any, scripts: Scripts) -> None:
        self._r = client
        self._scripts = scripts
        self._held: dict[str, Snapshot] = {}  # job id → the hash as this process's last commit left it
        self._lock = threading.Lock()

    def snapshot(self, model: str, job_id: str) -> Snapshot | None:
        """The job as stored; None when it has no record, ``records.UnreadableRecord`` when this
        version cannot read it (``records.NewerRecord``: a newer version wrote it)."""
        job = keys.job_record(model, job_id)
        raw, rev, entry, released, fmt = self._r.hmget(job, "record", "rev", "entry", "released", "format")
        return self.parse(raw, rev, entry, released, fmt)

    def parse(
        self, raw: str | None, rev: str | None, entry: str | None, released: str | None, fmt: str | None = None
    ) -> Snapshot | None:
        """A ``Snapshot`` of the hash fields ``record, rev, entry, released, format`` as read (None: no record)."""
        if raw is None:
            return None
        record = records.parse(raw, records.record_format(fmt), readable=self._scripts.record_format)
        try:
            return Snapshot(record, int(rev or 0), entry or "", int(released or 0))
        except ValueError:
            raise records.UnreadableRecord(raw, f"job hash: rev {rev!r}, released {released!r}") from None

    def unread(self, model: str, job_id: str) -> Unread | None:
        """The job hash as stored, its record left unread (a newer version's); None when it has no record."""
        job = keys.job_record(model, job_id)
        fields = ("record", "rev", "status", "attempt", "entry", "cancel", "format")
        raw, rev, status, attempt, entry, cancel, fmt = self._r.hmget(job, *fields)
        if raw is None:
            return None
        try:
            numbers = int(rev or 0), int(attempt or 0)
        except ValueError:
            raise records.UnreadableRecord(raw, f"job hash: rev {rev!r}, attempt {attempt!r}") from None
        return Unread(
            job_id,
            model,
            raw,
            numbers[0],
            status or "",
            numbers[1],
            entry or "",
            cancel == "1",
            records.record_format(fmt),
        )

    def snapshot_entry(self, model: str, job_id: str) -> str | None:
        return self._r.hget(keys.job_record(model, job_id), "entry")  # type: ignore[no-any-return]

    def commit(self, snap: Snapshot, plan: Plan, *, hold: bool = False) -> Reply:
        """Commit ``plan`` (built from ``snap``). ``hold``: the job is this process's own claim; while
        it stays running, the state the commit leaves is remembered for the claim's next write."""
        reply = self._scripts.commit(plan)
        record = plan.record or snap.record
        if hold and reply.kind == "ok" and record.status is Status.running:
            self.hold(plan.job_id, Snapshot(record, snap.rev + 1, reply.entry, snap.released + plan.released_incr))
        else:
            self.forget(plan.job_id)
        return reply

    def hold(self, job_id: str, after: Snapshot) -> None:
        """Remember ``after``, the hash as this process's own claim just left it, for the claim's next write."""
        with self._lock:
            if len(self._held) >= _HELD_MAX:
                self._held.clear()
            self._held[job_id] = after

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._held.pop(job_id, None)

    def mutate(
        self, model: str, job_id: str, build: Callable[[Snapshot], Plan | None], *, held: bool = False
    ) -> Reply | None:
        """Read, plan, commit; again on a lost race. None: refused (stale claim, nothing to do, gone).

        ``held``: a write of this process's claim; planned from the state its last commit left when
        there is one (no read), and from a fresh read after a conflict or a refusal of that plan."""
        with self._lock:
            snap = self._held.get(job_id) if held else None
        for _ in range(MAX_CAS_TRIES):
            remembered = snap is not None
            if snap is None:
                snap = self.snapshot(model, job_id)
                if snap is None:
                    return None
            plan = build(snap)
            if plan is None:
                if remembered:  # refused on what was remembered: decide on what is stored
                    self.forget(job_id)
                    snap = None
                    continue
                return None
            reply = self.commit(snap, plan, hold=held)
            if reply.done:
                return reply
            if reply.kind != "conflict":
                return None
            snap = None
        raise RuntimeError(f"job {job_id}: too many concurrent writers")

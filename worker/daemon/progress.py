"""Per-attempt checkpoints: stage and progress writes, cancel polling, time limit, stale claim, stop.

``on_step`` is the pipeline's step callback (``callback_on_step_end`` underneath): it polls the
durable cancel flag at every step, so a cancel ends the job within one step, and writes progress at
most once per ``interval_s`` (the record is read by pollers, not a log of steps). A write answers
the cancel flag as it found it (``WorkerQueue.write_progress``), so a step or a stage that writes
needs no poll of its own: one queue call each. A stage entered and left at once (``instant``: loading
a model already resident) is noted with the next write instead of a write of its own. Whatever it raises
unwinds the pipeline: ``JobCanceled``, ``JobError(timeout)``, ``StaleClaim`` or ``JobInterrupted``, or
``BackendUnavailable`` from the queue (a transient failure: the settler retries the job).
"""

from __future__ import annotations

import threading
import time

from worker.core.contract import Stage
from worker.core.errors import ErrorCode, JobCanceled, JobError, JobInterrupted, StaleClaim
from worker.daemon.lease import Lease
from worker.queue.base import WorkerQueue

__all__ = ["JobProgress"]


class JobProgress:
    def __init__(self, queue: WorkerQueue, lease: Lease, *, interval_s: float, stop_now: threading.Event) -> None:
        self._queue = queue
        self._lease = lease
        self._interval_s = interval_s
        self._stop_now = stop_now
        self._stage = Stage.queued
        self._passed: list[Stage] = []  # instant stages entered since the last write
        self._last_write = 0.0

    @property
    def stage(self) -> Stage:
        return self._stage

    def enter(self, stage: Stage, *, instant: bool = False) -> None:
        """Start ``stage``: check everything, then record it with progress 0 (always written; the
        write answers the cancel flag). ``instant``: the stage ends at once; it is noted with the next
        write, which checks the claim and the cancel flag for both."""
        self.check()
        if instant:
            self._passed.append(stage)
            self._stage = stage
            return
        self._stage = stage
        self._write(0.0)

    def on_step(self, step: int, total: int) -> None:
        """Step callback: ``step`` steps of ``total`` are done (1-based, as ``pipelines.runtime`` reports)."""
        done = min(1.0, step / max(1, total))
        if done >= 1.0 or time.monotonic() - self._last_write >= self._interval_s:
            self.check()
            self._write(done)
        else:
            self.check(poll_cancel=True)

    def check(self, *, poll_cancel: bool = False) -> None:
        """Raise if this attempt must stop: stale claim, worker stopping, time limit, cancel flag."""
        claim = self._lease.claim
        if self._lease.stale.is_set():
            raise StaleClaim(f"claim of {claim.job_id} attempt {claim.attempt} is stale")
        if self._stop_now.is_set():
            raise JobInterrupted("worker stopping")
        if time.monotonic() > self._lease.deadline:
            raise JobError(ErrorCode.timeout, "the job ran past its time limit")
        if poll_cancel and self._queue.cancel_requested(claim.job_id):
            raise JobCanceled()

    def _write(self, progress: float) -> None:
        """Write stage and progress; raise ``StaleClaim`` when refused, ``JobCanceled`` when the write
        found the cancel flag (the stage is on the record then; the canceled outcome ends it)."""
        self._last_write = time.monotonic()
        passed = [s for s in self._passed if s is not self._stage]
        self._passed = []
        written = self._queue.write_progress(self._lease.claim, self._stage, progress, passed=passed)
        if not written.accepted:
            self._lease.stale.set()
            raise StaleClaim(f"progress refused for {self._lease.claim.job_id}")
        if written.cancel_requested:
            raise JobCanceled()

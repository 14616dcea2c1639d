"""Per-attempt checkpoints: stage and progress writes, cancel polling, time limit, stale claim, stop.

``on_step`` is the pipeline's step callback (``callback_on_step_end`` underneath): it polls the
durable cancel flag at every step, so a cancel ends the job within one step, and writes progress at
most once per ``interval_s`` (the record is read by pollers, not a log of steps). A live preview
(``offer_preview``, from the model's step callback just before ``on_step``) rides on that step's write,
which it forces: a preview costs the queue no write of its own, and previews come at most once per
preview interval (``pipelines.runtime.previews``), so neither do the writes they force. A write answers
the cancel flag as it found it (``WorkerQueue.write_progress``), so a step or a stage that writes
needs no poll of its own: one queue call each. A stage entered and left at once (``instant``: loading
a model already resident) is noted with the next write instead of a write of its own.

A stage entered with ``overlap`` (denoising) starts its work while its write is in flight on
``writer``: the job reaches the model without waiting for a queue round trip. What that write found
is raised at the attempt's next checkpoint (the first step, the next stage, ``check``) or by
``ended_by`` when the work raised first; at most one write is in flight and the next one waits for it,
so writes land in order. A cancel or a stale claim that write finds still stops the job within one
step: the first. No ``writer`` (``worker.overlap_stage_write`` off, the default): the write is awaited in
place. What the overlap buys: docs/benchmarks.md, "Micro-optimizations off by default (issue 48)".

Whatever it raises unwinds the pipeline: ``JobCanceled``, ``JobError(timeout)``, ``StaleClaim`` or
``JobInterrupted``, or ``BackendUnavailable`` from the queue (a transient failure: the settler
retries the job).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor, Future

from foundation.core.contract import Stage
from foundation.core.errors import ErrorCode, JobCanceled, JobError
from foundation.core.media import Preview
from foundation.queue.base import ProgressWrite, WorkerQueue
from worker.errors import JobInterrupted, StaleClaim
from worker.lease import Lease

__all__ = ["JobProgress"]


class JobProgress:
    def __init__(
        self,
        queue: WorkerQueue,
        lease: Lease,
        *,
        interval_s: float,
        stop_now: threading.Event,
        writer: Executor | None = None,
    ) -> None:
        self._queue = queue
        self._lease = lease
        self._interval_s = interval_s
        self._stop_now = stop_now
        self._writer = writer  # None: every write waits for its answer
        self._stage = Stage.queued
        self._passed: list[Stage] = []  # instant stages entered since the last write
        self._last_write = 0.0
        self._in_flight: Future[ProgressWrite] | None = None
        self._preview: Preview | None = None  # offered by this step, sent with its write

    @property
    def stage(self) -> Stage:
        return self._stage

    def enter(self, stage: Stage, *, instant: bool = False, overlap: bool = False) -> None:
        """Start ``stage``: check everything, then record it with progress 0 (always written; the
        write answers the cancel flag). ``instant``: the stage ends at once; it is noted with the next
        write, which checks the claim and the cancel flag for both. ``overlap``: the write goes out in
        the background and its answer is taken at the next checkpoint."""
        self.check()
        self._stage = stage
        if instant:
            self._passed.append(stage)
        else:
            self._write(0.0, overlap=overlap)

    def on_step(self, step: int, total: int) -> None:
        """Step callback: ``step`` steps of ``total`` are done (1-based, as ``pipelines.runtime.profile`` reports)."""
        done = min(1.0, step / max(1, total))
        due = done >= 1.0 or time.monotonic() - self._last_write >= self._interval_s
        if due or self._preview is not None:
            self.check()
            self._write(done)
        else:
            self.check(poll_cancel=True)

    def offer_preview(self, preview: Preview) -> None:
        """A live preview of the step about to be reported: sent with that step's progress write."""
        self._preview = preview

    def check(self, *, poll_cancel: bool = False) -> None:
        """Raise if this attempt must stop: what the write in flight found, stale claim, worker stopping,
        time limit, cancel flag (``poll_cancel``: the flag as stored now, not as that write found it)."""
        self._take_answer()
        claim = self._lease.claim
        if self._lease.stale.is_set():
            raise StaleClaim(f"claim of {claim.job_id} attempt {claim.attempt} is stale")
        if self._stop_now.is_set():
            raise JobInterrupted("worker stopping")
        if time.monotonic() > self._lease.deadline:
            raise JobError(ErrorCode.timeout, "the job ran past its time limit")
        if poll_cancel and self._queue.cancel_requested(claim.job_id):
            raise JobCanceled()

    def ended_by(self, exc: BaseException) -> BaseException:
        """What ends the attempt that raised ``exc``: what the write in flight found, if it found
        anything (a cancel, a stale claim, a queue error: it was sent before ``exc`` was raised), else ``exc``."""
        try:
            self._take_answer()
        except Exception as found:
            return found
        return exc

    def _take_answer(self) -> None:
        """Wait for the write in flight, if any, and raise what it found."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            self._answer(in_flight.result())

    def _write(self, progress: float, *, overlap: bool = False) -> None:
        """Write stage and progress; raise ``StaleClaim`` when refused, ``JobCanceled`` when the write
        found the cancel flag (the stage is on the record then; the canceled outcome ends it).
        ``overlap`` (with a writer): send it and return; ``check`` takes the answer."""
        self._take_answer()
        self._last_write = time.monotonic()
        passed = [s for s in self._passed if s is not self._stage]
        self._passed = []
        claim, stage = self._lease.claim, self._stage
        preview, self._preview = self._preview, None
        if overlap and self._writer is not None:
            self._in_flight = self._writer.submit(
                self._queue.write_progress, claim, stage, progress, passed=passed, preview=preview
            )
        else:
            self._answer(self._queue.write_progress(claim, stage, progress, passed=passed, preview=preview))

    def _answer(self, written: ProgressWrite) -> None:
        if not written.accepted:
            self._lease.stale.set()
            raise StaleClaim(f"progress refused for {self._lease.claim.job_id}")
        if written.cancel_requested:
            raise JobCanceled()

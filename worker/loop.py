"""``genworker worker``: a long-running daemon that turns queued jobs into uploaded videos.

Threads and who owns what:

- **main** — setup, then supervision: it only waits, so signals are handled at once (see
  ``worker.lifecycle``). On drain it gives running work ``drain_grace_s``, then interrupts it; work
  that does not stop within a few seconds (stuck inside one CUDA call) has its claims released from
  here and the process exits.
- **gpu** — ``process()``: claim → run on the GPU → hand over to post-processing, until draining.
- **postprocess** — encode → upload → finish, one job behind the GPU (``worker.postprocess``).
- **progress** — the denoising stage's write, sent while the model starts, with
  ``worker.overlap_stage_write`` on (``worker.runner``).
- **checkpoint-writer** — serializes and uploads the running job's denoising checkpoints, the newest one
  only (``worker.checkpoints``); started by a job's first checkpoint.
- **lease-keeper** — renews the leases of claimed jobs (``worker.lease``).
- **heartbeat** — the fleet heartbeat and the queue's reclaim pass (``worker.lease``).
- **status-http** — ``/healthz``, ``/readyz`` and ``/metrics`` (``worker.health``).
- **sweeper** — retention, and what killed attempts and expired records left behind (``worker.sweeper``).

Each has that name (an executor's adds ``_0``); tests/integration/test_worker_threads.py compares this
list with the threads a running worker starts. Libraries start none that lasts: diffusers and transformers
load weights on a pool of threads that ends with the load, and tqdm's monitor thread is switched off
(``pipelines.runtime.profile.quiet_progress_bars``).

A job is never left ``running``: it ends with a status, is retried or released, or — if this
process dies — its lease lapses and the queue re-delivers it (or dead-letters it at the attempt
limit).
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import threading
import time

from foundation.core.errors import BackendUnavailable, FatalWorkerError
from foundation.queue.base import Claim
from foundation.queue.policy import ReleaseReason
from foundation.settings import Settings
from worker.context import WorkerContext, start_worker_context, work_root
from worker.lifecycle import Shutdown
from worker.verdict import FaultKind, backoff_s

__all__ = ["Worker", "run_worker"]

log = logging.getLogger("genworker.worker")

# After the drain grace, running work gets this long to notice the interrupt and release its job.
_INTERRUPT_WAIT_S = 5.0
_MAX_QUEUE_BACKOFF_S = 30.0
# A key never written: asking whether it exists tells whether the store answers at all.
_STORE_PROBE_KEY = "genworker-probe/store"


class Worker:
    def __init__(self, ctx: WorkerContext, shutdown: Shutdown) -> None:
        self.ctx = ctx
        self.shutdown = shutdown
        self.exit_code = 0

    # ------------------------------------------------------------------------------------- gpu thread
    def process(self) -> None:
        """The GPU loop: claim the next job, run it, hand it over; until a drain starts."""
        failures = 0
        while not self.shutdown.draining.is_set():
            try:
                claim = self.claim_next()
                if claim is not None:
                    self.run_job(claim)
                failures = 0
            except FatalWorkerError as e:
                log.critical("fatal: %s", e)
                self.exit_code = 1
                self.shutdown.request_drain("fatal error")
            except BackendUnavailable as e:  # the queue is unreachable: back off and try again
                failures += 1
                log.error("queue unavailable, retrying in %.0f s: %s", self._backoff(failures), e)
                self.shutdown.draining.wait(self._backoff(failures))
            except Exception as e:
                # Kept broad on purpose: the GPU thread must outlive a bug in one round (a dead GPU
                # thread stops the worker), so it is logged with its traceback and backed off alike.
                failures += 1
                log.error("worker loop error, retrying in %.0f s: %s", self._backoff(failures), e, exc_info=e)
                self.shutdown.draining.wait(self._backoff(failures))
        try:
            self.ctx.post.wait()  # the job behind the GPU finishes too (within the drain grace)
        except FatalWorkerError:
            self.exit_code = 1

    @staticmethod
    def _backoff(failures: int) -> float:
        return min(_MAX_QUEUE_BACKOFF_S, 2.0 ** min(failures, 5))

    def claim_next(self) -> Claim | None:
        """The next job of a hosted model this worker is not backing off from (``worker.faults``)."""
        ctx = self.ctx
        block_s = ctx.settings.worker.claim_block_s
        models = ctx.faults.claimable(ctx.hosted_models)
        if not models:
            # A store outage ends when the store answers: probe it rather than sit out the backoff.
            ctx.faults.probe_backend(lambda: ctx.store.exists(_STORE_PROBE_KEY))
            models = ctx.faults.claimable(ctx.hosted_models)
        if not models or not self._work_disk_has_room():
            # A worker-wide fault, or every model backing off: other workers take the jobs.
            self.shutdown.draining.wait(max(0.05, ctx.faults.wait_s(max(block_s, 0.05))))
            return None
        prefer = [m for m in ctx.cache.loaded() if m in models]
        return ctx.queue.claim(ctx.worker_id, models, prefer=prefer, block_s=block_s)

    def _work_disk_has_room(self) -> bool:
        """Whether the work disk can take a job's output; if not, a ``disk`` fault (no claim, backoff): a job
        claimed now would be denoised for minutes and then released when its encode cannot be written."""
        need_mb = self.ctx.settings.worker.min_free_disk_mb
        if need_mb == 0:  # no check: a full disk is met by the encode (released as a disk fault) instead
            return True
        free_mb = shutil.disk_usage(work_root(self.ctx.settings)).free // 1_000_000
        if free_mb >= need_mb:
            self.ctx.faults.clear("", FaultKind.disk)  # room again: what this check reported is over
            return True
        reason = f"the work disk has {free_mb} MB free, under worker.min_free_disk_mb ({need_mb} MB)"
        self.ctx.faults.report(FaultKind.disk, "", reason)
        return False

    def run_job(self, claim: Claim) -> None:
        ctx = self.ctx
        attempt = ctx.runner.begin(claim)
        ctx.current_job = claim.job_id
        try:
            handoff = ctx.runner.run_on_gpu(attempt)
        finally:
            ctx.current_job = None
        if handoff is not None:
            ctx.post.submit(handoff)

    # ------------------------------------------------------------------------------------ main thread
    def supervise(self, gpu: threading.Thread) -> None:
        """Wait for the GPU thread; on drain give it the grace, then interrupt, then force."""
        preempt_file = self.ctx.settings.worker.preempt_file
        while gpu.is_alive() and not self.shutdown.draining.is_set():
            gpu.join(0.2)
            if preempt_file and os.path.exists(preempt_file):  # a spot notice: drain as on SIGTERM
                self.shutdown.request_drain("preemption notice")
        self.ctx.health.set_ready(False, "draining")
        grace_end = (self.shutdown.drain_started or time.monotonic()) + self.ctx.settings.worker.drain_grace_s
        while gpu.is_alive() and not self.shutdown.stop_now.is_set() and time.monotonic() < grace_end:
            gpu.join(0.2)
        if not gpu.is_alive():
            return
        self.shutdown.request_stop("drain grace over")
        gpu.join(_INTERRUPT_WAIT_S)
        if gpu.is_alive():
            self.force_exit()

    def force_exit(self) -> None:
        """Work is stuck in a call nothing can interrupt: release its claims so others take them now.

        Released as ``hung``: that uses up the attempt (``policy.release_uses_attempt``), so a job that
        hangs wherever it runs fails after its attempts instead of being re-delivered forever."""
        for lease in self.ctx.leases.held():
            released = self.ctx.queue.release(lease.claim, reason=ReleaseReason.hung)
            log.warning("released stuck job", extra={"job_id": lease.claim.job_id, "released": released})
        logging.shutdown()
        os._exit(self.exit_code)


def _first_heartbeat(ctx: WorkerContext, shutdown: Shutdown) -> bool:
    """Announce the worker, waiting out a queue that cannot be reached yet (Redis restarting, a pod scheduled
    before it): retried with the fault backoff, not ready meanwhile, never an exit (which an orchestrator would
    answer with a crash loop for as long as the queue is down). False when a drain came first."""
    ws = ctx.settings.worker
    tries = 0
    while not shutdown.draining.is_set():
        try:
            ctx.heartbeat.tick()
            return True
        except BackendUnavailable as e:
            tries += 1
            delay_s = backoff_s(tries, ws.fault_backoff_s, ws.fault_backoff_max_s)
            ctx.health.set_ready(False, "queue unavailable")
            log.warning("queue unavailable at start, retrying in %.1f s: %s", delay_s, e, extra={"tries": tries})
            shutdown.draining.wait(delay_s)
    return False


def run_worker(settings: Settings, *, install_signals: bool = True, shutdown: Shutdown | None = None) -> int:
    """Set up, run until drained, tear down. Returns the process exit code. ``shutdown``: the drain and stop
    events to obey (a worker run inside another program, which drains it); by default its own."""
    shutdown = shutdown or Shutdown()
    if install_signals:
        shutdown.install()
    try:
        ctx = start_worker_context(settings, shutdown)
    except FatalWorkerError as e:
        log.critical("cannot start: %s", e)
        return 2
    worker = Worker(ctx, shutdown)
    gpu = threading.Thread(target=worker.process, name="gpu", daemon=True)
    # What setup made (modules, torch, the preloaded models' objects) lives as long as the process:
    # out of the collector's view, a full collection no longer walks it in the middle of a claim.
    gc.collect()
    gc.freeze()
    if _first_heartbeat(ctx, shutdown):
        ctx.health.set_ready(True, "ready")
        log.info("ready", extra={"worker_id": ctx.worker_id, "models": ctx.hosted_models})
        gpu.start()
        worker.supervise(gpu)
    ctx.stop()
    log.info("stopped", extra={"exit_code": worker.exit_code})
    return worker.exit_code

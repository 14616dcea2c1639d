"""Background threads that keep a worker's promises while the GPU thread is busy.

- ``LeaseKeeper`` renews the lease of every held claim every ``lease_ttl_s / 3``. It runs during
  denoising because torch kernels release the GIL; pure-Python work between steps is short. A
  renewal answered False means the claim went stale (re-delivered or finished elsewhere): the job's
  ``stale`` event is set and the GPU thread abandons it at the next step. A job still held long
  after its time limit is stuck inside one pipeline step (nothing in-process can interrupt a CUDA
  kernel): the keeper stops renewing it, so the queue re-delivers or dead-letters it when the lease
  lapses, and marks the worker unhealthy so its orchestrator restarts the process.
- ``Heartbeat`` reports the worker (hosted and loaded models, current job, ready) every
  ``heartbeat_s`` with a TTL of three beats, re-queues other workers' lapsed leases (counted in
  ``genworker_leases_reclaimed_total``), says which jobs of a newer version the queue left to that
  version's workers or failed (``genworker_newer_records_total``, a log line each), and samples queue
  depth and GPU memory for the metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from foundation.core.contract import utcnow
from foundation.core.errors import BackendUnavailable
from foundation.queue.base import Claim, WorkerHeartbeat, WorkerQueue
from worker.metrics import WorkerMetrics

__all__ = ["Heartbeat", "Lease", "LeaseKeeper"]

log = logging.getLogger("genworker.lease")


@dataclass
class Lease:
    """One held claim: renewed until dropped; ``stale`` is set when the queue refuses a renewal."""

    claim: Claim
    deadline: float  # time.monotonic() after which the job has run past its time limit
    stale: threading.Event = field(default_factory=threading.Event)
    hung: bool = False


class _Ticker(threading.Thread):
    """A daemon thread calling ``tick`` every ``interval_s`` until ``stop``; a failing tick is logged
    and the next one tries again."""

    def __init__(self, name: str, interval_s: float) -> None:
        super().__init__(name=name, daemon=True)
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            try:
                self.tick()
            except BackendUnavailable as e:  # the queue is down for now: the next tick retries
                log.warning("%s tick failed: %s", self.name, e, extra={"error": type(e).__name__})
            except Exception as e:
                # Kept broad on purpose: this thread must outlive any failure, a bug included. A dead
                # lease keeper lets every held lease lapse mid-job; a dead heartbeat hides a live worker.
                log.error("%s tick failed: %s", self.name, e, extra={"error": type(e).__name__}, exc_info=e)

    def tick(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop_event.set()


class LeaseKeeper(_Ticker):
    def __init__(
        self,
        queue: WorkerQueue,
        lease_ttl_s: float,
        hang_margin_s: float,
        on_hang: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("lease-keeper", lease_ttl_s / 3)
        self._queue = queue
        self._clock = clock  # the clock of every ``Lease.deadline`` (tests step their own)
        self._hang_margin_s = hang_margin_s
        self._on_hang = on_hang
        self._lock = threading.Lock()
        self._leases: dict[tuple[str, int], Lease] = {}

    def hold(self, claim: Claim, max_job_seconds: float) -> Lease:
        lease = Lease(claim=claim, deadline=self._clock() + max_job_seconds)
        with self._lock:
            self._leases[(claim.job_id, claim.attempt)] = lease
        return lease

    def drop(self, lease: Lease) -> None:
        with self._lock:
            self._leases.pop((lease.claim.job_id, lease.claim.attempt), None)

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._leases.values())

    def tick(self) -> None:
        """Renew every held lease. Each renewal stands alone: one that raises is logged and the
        others are still renewed this tick (the failed one is tried again at the next)."""
        now = self._clock()
        for lease in self.held():
            if lease.hung or lease.stale.is_set():
                continue
            if now > lease.deadline + self._hang_margin_s:
                self._give_up(lease)
                continue
            try:
                self._renew(lease)
            except BackendUnavailable as e:
                log.warning("renewal failed: %s", e, extra={"job_id": lease.claim.job_id, "error": type(e).__name__})
            except Exception as e:
                # Kept broad on purpose: a bug in one renewal must not let the other leases lapse.
                extra = {"job_id": lease.claim.job_id, "error": type(e).__name__}
                log.error("renewal failed: %s", e, extra=extra, exc_info=e)

    def _renew(self, lease: Lease) -> None:
        if not self._queue.renew(lease.claim):
            log.warning("lease lost: the claim is stale", extra={"job_id": lease.claim.job_id})
            lease.stale.set()

    def _give_up(self, lease: Lease) -> None:
        lease.hung = True
        reason = f"job {lease.claim.job_id} is stuck past its time limit; its lease is left to lapse"
        self._on_hang(reason)


class Heartbeat(_Ticker):
    def __init__(
        self,
        queue: WorkerQueue,
        interval_s: float,
        reclaim_interval_s: float,
        beat: Callable[[], WorkerHeartbeat],
        metrics: WorkerMetrics,
    ) -> None:
        super().__init__("heartbeat", interval_s)
        self._queue = queue
        self._beat = beat
        self._metrics = metrics
        self._reclaim_interval_s = reclaim_interval_s
        self._last_reclaim = time.monotonic()

    def tick(self) -> None:
        beat = self._beat()
        self._queue.heartbeat(beat.model_copy(update={"at": utcnow()}), ttl_s=3 * self.interval_s)
        for model in [*beat.hosted_models, *beat.faulted_models]:  # a faulted model's jobs wait: count them
            self._metrics.queue_depth.labels(model).set(self._queue.depth(model))
            backlog = self._queue.backlog(model)
            self._metrics.queue_projects.labels(model).set(backlog.projects)
            self._metrics.queue_oldest_seconds.labels(model).set(backlog.oldest_age_s or 0.0)
        self._metrics.sample_gpu_memory()
        if time.monotonic() - self._last_reclaim >= self._reclaim_interval_s:
            self._last_reclaim = time.monotonic()
            count = self._queue.reclaim_expired()
            if count:
                self._metrics.leases_reclaimed.inc(count)
                log.info("re-queued lapsed leases", extra={"count": count})
        self._report_newer()

    def _report_newer(self) -> None:
        """Jobs a newer version wrote that this worker's queue met (a rolling upgrade): said once each."""
        for met in self._queue.newer_records():
            outcome = "failed" if met.failed else "left"
            self._metrics.newer_records.labels(met.model, outcome).inc()
            extra = {"job_id": met.job_id, "model": met.model, "record_format": met.record_format}
            extra["waited_s"] = met.waited_s
            if met.failed:
                log.warning(
                    "a newer version's job waited in vain for its workers: failed version_unavailable", extra=extra
                )
            else:
                log.info("a newer version's job left to its workers (no attempt used)", extra=extra)

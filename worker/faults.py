"""This worker's own faults: a model that does not load here, an ffmpeg that cannot run, a full work
disk, an unusable GPU. Such a fault is not the job's: the settler releases the job (no attempt used
up) and ``LocalFaults`` keeps the worker away from what is broken, so the fleet's other workers take it.

- **Backoff.** A fault stops claims of its model (``model_load``) or of every model (the other kinds)
  for ``base_s * 2**(failures-1)``, capped at ``cap_s``. When the backoff ends the next claim is the
  probe: a success clears the fault, another failure doubles the wait.
- **Readiness.** While a fault is recorded (backing off or probing) the model is not ready: its
  ``genworker_model_ready`` is 0, ``genworker_worker_fault{kind,model}`` is 1 (``model`` is empty for
  a worker-wide fault) and ``/readyz`` names the model, the kind and the reason; it answers 503 once
  no hosted model is left.
- **Offered again only when it works.** While a fault is recorded, the worker's heartbeat leaves the
  model out of ``hosted_models`` (it names it in ``faulted_models``), so ``GET /v1/models`` reports the
  model unavailable when no other worker takes it; its jobs stay queued meanwhile.
- **No endless loop.** A model that does not load on several workers is the model's fault, not
  theirs: ``judge`` turns the release into ``failed: model_load_failed`` once ``load_failure_workers``
  distinct workers (or every live host of the model, if fewer, but at least two) gave the job back,
  read from the job's events through ``FleetView``. A model's only live host never fails a job for
  its own load failure: one worker cannot tell its own fault from the model's, so it backs off and the
  jobs wait for it to recover or for another host (unless ``load_failure_workers`` is 1).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from foundation.core.contract import Status
from foundation.core.errors import BackendUnavailable, ErrorCode
from foundation.queue.base import Claim, Event, WorkerHeartbeat
from foundation.queue.policy import claimed_by, released_event
from worker.metrics import WorkerMetrics
from worker.verdict import FaultKind, Verdict

__all__ = ["FleetView", "LocalFaults", "releasers"]

log = logging.getLogger("genworker.faults")

_CLAIMED_BY = claimed_by("")
_LOAD_RELEASE = released_event(FaultKind.model_load.value)


class FleetView(Protocol):
    """What the daemon reads of the rest of the fleet to judge a model that does not load here.

    Both queue backends answer it (it is part of ``JobQueue``); ``WorkerQueue`` does not include it.
    """

    def events(self, job_id: str | None = None, *, after: str | None = None, limit: int = 1000) -> list[Event]: ...

    def live_workers(self) -> list[WorkerHeartbeat]: ...


@dataclass
class _Fault:
    kind: FaultKind
    model: str  # "" for a worker-wide fault
    reason: str
    failures: int
    until: float  # monotonic time the backoff ends


def releasers(events: Sequence[Event]) -> set[str]:
    """Workers that gave the job back because its model would not load on them: each ``claimed by
    <worker>`` followed by ``released: model_load``. A drain or another local fault does not count."""
    holder: str | None = None
    found: set[str] = set()
    for event in events:
        reason = event.reason or ""
        if event.status is Status.running and reason.startswith(_CLAIMED_BY):
            holder = reason[len(_CLAIMED_BY) :]
        elif event.status is Status.queued and reason == _LOAD_RELEASE and holder is not None:
            found.add(holder)
            holder = None
    return found


class LocalFaults:
    def __init__(
        self,
        metrics: WorkerMetrics,
        hosted: Sequence[str],
        *,
        worker_id: str,
        base_s: float,
        cap_s: float,
        load_failure_workers: int,
        fleet: FleetView | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metrics = metrics
        self._hosted = tuple(hosted)
        self._worker_id = worker_id
        self._base_s, self._cap_s = base_s, cap_s
        self._load_failure_workers = load_failure_workers
        self._fleet = fleet
        self._clock = clock
        self._lock = threading.Lock()
        self._faults: dict[tuple[FaultKind, str], _Fault] = {}

    # ------------------------------------------------------------------------------ fault reports
    def judge(self, claim: Claim, verdict: Verdict) -> Verdict:
        """Record ``verdict``'s fault and back off; the verdict to report (a load failure seen on
        enough workers becomes ``failed: model_load_failed``)."""
        assert verdict.fault is not None
        self.report(verdict.fault, claim.model, verdict.message)
        if verdict.fault is not FaultKind.model_load:
            return verdict
        workers = self._load_failures(claim)
        if workers is None:
            return verdict
        message = f"{verdict.message} (the model failed to load on {workers} workers)"
        return Verdict("failed", ErrorCode.model_load_failed, message)

    def report(self, kind: FaultKind, model: str, reason: str) -> float:
        """Record a fault of ``kind`` met running ``model``; returns the backoff in seconds."""
        key = (kind, "" if kind.worker_wide else model)
        with self._lock:
            previous = self._faults.get(key)
            failures = previous.failures + 1 if previous else 1
            wait_s = float(min(self._cap_s, self._base_s * 2 ** (failures - 1)))
            self._faults[key] = _Fault(kind, key[1], reason, failures, self._clock() + wait_s)
            self._publish()
        self._metrics.local_faults.labels(kind.value, model).inc()
        scope = key[1] or "every model"
        log.warning(
            "worker fault: not claiming %s for %.0f s: %s",
            scope,
            wait_s,
            reason,
            extra={"fault": kind.value, "model": model, "failures": failures},
        )
        return wait_s

    def clear(self, model: str, *kinds: FaultKind) -> None:
        """``model`` just got past what ``kinds`` break: those faults are over."""
        keys = [(k, "" if k.worker_wide else model) for k in kinds]
        with self._lock:
            gone = [self._faults.pop(key) for key in keys if key in self._faults]
            if gone:
                self._publish()
        for fault in gone:
            log.info("worker fault cleared", extra={"fault": fault.kind.value, "model": fault.model or model})

    def probe_backend(self, answers: Callable[[], object]) -> None:
        """End a ``backend`` fault as soon as the backend answers again (``answers`` returns): an
        outage is over when the store is back, not when a doubling backoff runs out. Cheap to call
        while backing off; nothing to do without a backend fault."""
        with self._lock:
            if (FaultKind.backend, "") not in self._faults:
                return
        try:
            answers()
        except Exception:  # kept broad on purpose: any failure of the probe means "not back yet"
            return
        self.clear("", FaultKind.backend)

    # ------------------------------------------------------------------------------ what to claim
    def claimable(self, models: Sequence[str]) -> list[str]:
        """``models`` whose backoff is over (none while a worker-wide fault backs off)."""
        now = self._clock()
        with self._lock:
            waiting = {f.model for f in self._faults.values() if f.until > now}
        if "" in waiting:
            return []
        return [m for m in models if m not in waiting]

    def wait_s(self, limit_s: float) -> float:
        """How long until a backoff ends, at most ``limit_s``."""
        now = self._clock()
        with self._lock:
            ends = [f.until - now for f in self._faults.values() if f.until > now]
        return max(0.0, min([limit_s, *ends]))

    def ready_models(self) -> list[str]:
        """Hosted models with no fault recorded (a probing model is not ready until it succeeds)."""
        with self._lock:
            return self._ready_models()

    def snapshot(self) -> list[dict[str, Any]]:
        """The faults, for ``/readyz``."""
        now = self._clock()
        with self._lock:
            faults = sorted(self._faults.values(), key=lambda f: (f.kind.value, f.model))
        return [
            {
                "kind": f.kind.value,
                "model": f.model or None,
                "reason": f.reason,
                "failures": f.failures,
                "retry_in_s": round(max(0.0, f.until - now), 1),
            }
            for f in faults
        ]

    # ------------------------------------------------------------------------------ internals
    def _ready_models(self) -> list[str]:
        blocked = {f.model for f in self._faults.values()}
        return [] if "" in blocked else [m for m in self._hosted if m not in blocked]

    def _publish(self) -> None:
        """Metrics follow the recorded faults (called with the lock held)."""
        self._metrics.set_model_faults(self._ready_models(), [(f.kind.value, f.model) for f in self._faults.values()])

    def _load_failures(self, claim: Claim) -> int | None:
        """How many distinct workers failed to load the job's model, once that reaches the limit."""
        if self._fleet is None:
            return None
        try:
            workers = releasers(self._fleet.events(claim.job_id)) | {self._worker_id}
            hosts = sum(
                1
                for beat in self._fleet.live_workers()
                if claim.model in beat.hosted_models or claim.model in beat.faulted_models
            )
        except BackendUnavailable as e:  # cannot tell now: release, and judge again at the next failure
            log.warning("cannot read the fleet to judge a load failure: %s", e, extra={"job_id": claim.job_id})
            return None
        limit = self._load_failure_workers
        if limit > 1:  # every live host, if fewer, but never one alone: it may be that worker's fault only
            limit = max(2, min(limit, hosts))
        return len(workers) if len(workers) >= limit else None

"""One claimed attempt as it moves through the worker, and how it ends (``settle``).

``Attempt`` bundles what every stage needs: the claim, its lease, progress checkpoints and a logger
with the job bound. ``Settler`` turns an exception into the queue call ``worker.verdict`` prescribes
and is the only place that ends an attempt other than success. A fault of the worker's own
(``release_local``) goes through ``worker.faults`` first: it backs the worker off, and may turn
a load failure seen on enough workers into a failure of the job.

The record gets only the code's fixed public sentence (``foundation.core.errors.PUBLIC_MESSAGES``): the
verdict's own message, which may name store endpoints, paths, adapter classes or carry ffmpeg's
stderr, is written to this worker's log line for the outcome, with the job id bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.core.contract import ErrorInfo, Stage, Status
from foundation.core.errors import BackendUnavailable, ErrorCode, public_message
from foundation.queue.base import Claim, Outcome, WorkerQueue
from worker.checkpoints import delete_checkpoint
from worker.faults import LocalFaults
from worker.lease import Lease, LeaseKeeper
from worker.logs import JobLogger, log_stage
from worker.metrics import WorkerMetrics
from worker.progress import JobProgress
from worker.verdict import Verdict, backoff_s, classify

if TYPE_CHECKING:
    from foundation.stores.base import ArtifactStore
    from worker.pipeline_run import Rendered

__all__ = ["Attempt", "HandOff", "Settler"]

_TRACED = frozenset({ErrorCode.pipeline_error, ErrorCode.internal_error, ErrorCode.out_of_memory})


@dataclass
class Attempt:
    claim: Claim
    lease: Lease
    progress: JobProgress
    log: JobLogger
    started: float = field(default_factory=time.monotonic)

    @property
    def job_id(self) -> str:
        return self.claim.job_id

    @contextmanager
    def stage(
        self, metrics: WorkerMetrics, name: Stage, *, instant: bool = False, overlap: bool = False
    ) -> Iterator[None]:
        """Enter a stage on the record, log one line when it ends and observe its duration. ``instant``:
        the stage ends at once; ``overlap``: its write does not hold up its work (``JobProgress.enter``)."""
        self.progress.enter(name, instant=instant, overlap=overlap)
        started = time.perf_counter()
        with log_stage(self.log, name.value):
            yield
        metrics.stage_seconds.labels(self.claim.model, name.value).observe(time.perf_counter() - started)


@dataclass(frozen=True)
class HandOff:
    """What the GPU side hands to post-processing: the attempt, what the model rendered (the job as run,
    its media, the prompt extension, GPU seconds) and the work directory the encoder writes into."""

    attempt: Attempt
    rendered: Rendered
    work_dir: Path


class Settler:
    """Ends attempts that did not succeed, and releases the bookkeeping of every attempt."""

    def __init__(
        self,
        queue: WorkerQueue,
        leases: LeaseKeeper,
        metrics: WorkerMetrics,
        faults: LocalFaults,
        *,
        backoff_base_s: float,
        backoff_cap_s: float,
        store: ArtifactStore | None = None,
    ) -> None:
        self._queue = queue
        self._store = store  # where the generation's denoising checkpoint is deleted when it ends
        self._leases = leases
        self._metrics = metrics
        self._faults = faults
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s

    def settle(self, attempt: Attempt, exc: BaseException) -> None:
        """End ``attempt`` as ``exc`` prescribes. Re-raises ``FatalWorkerError`` after releasing the job."""
        verdict = classify(exc)
        if verdict.action == "release_local":
            verdict = self._faults.judge(attempt.claim, verdict)
        log, model = attempt.log, attempt.claim.model
        extra = {"stage": attempt.progress.stage.value, "code": verdict.code.value if verdict.code else None}
        if verdict.action == "abandon":
            log.info("claim is stale; attempt abandoned", extra=extra)
            self._metrics.abandoned.labels(model).inc()
            return
        self._log(attempt, verdict, exc, extra)
        try:
            accepted = self._report(attempt.claim, verdict)
        except BackendUnavailable as e:  # the lease lapses and the queue re-delivers the job
            log.error("could not report the outcome: %s", e, extra=extra)
            accepted = False
        except Exception as e:
            # Kept broad on purpose: settle runs on the GPU and post-processing threads, which must
            # outlive any one job; the lease lapses and the queue re-delivers the job all the same.
            log.error("could not report the outcome: %s", e, extra=extra, exc_info=e)
            accepted = False
        if accepted:
            self._count(model, verdict)
            if verdict.action in ("failed", "canceled") and self._store is not None:
                delete_checkpoint(self._store, attempt.job_id, log)  # over: nothing will resume it
        else:
            log.info("queue refused the outcome: the claim was stale", extra=extra)
            self._metrics.abandoned.labels(model).inc()
        if verdict.action == "fatal":
            raise exc

    def _log(self, attempt: Attempt, verdict: Verdict, exc: BaseException, extra: dict[str, str | None]) -> None:
        log = attempt.log
        if verdict.action in ("release", "fatal"):
            log.warning("releasing the job for re-delivery: %s", verdict.message, extra=extra)
        elif verdict.action == "release_local":
            fault = verdict.fault.value if verdict.fault else None
            log.warning(
                "fault of this worker: releasing the job for another worker: %s",
                verdict.message,
                extra={**extra, "fault": fault},
            )
        elif verdict.action == "retry":
            log.warning("transient failure, retrying: %s", verdict.message, extra=extra)
        elif verdict.action == "canceled":
            log.info("canceled", extra=extra)
        else:
            # Model-code failures deserve a traceback in the log; coded errors (bad input, timeout) do not.
            trace = exc if verdict.code in _TRACED else None
            log.error("failed: %s", verdict.message, extra=extra, exc_info=trace)

    def _report(self, claim: Claim, verdict: Verdict) -> bool:
        """The queue call for ``verdict``; False when the queue refused it (stale claim)."""
        if verdict.action in ("release", "release_local", "fatal"):
            return self._queue.release(claim, reason=verdict.fault.value if verdict.fault else None)
        if verdict.action == "canceled":
            return self._queue.finish(claim, Outcome(status=Status.canceled))
        assert verdict.code is not None
        # The details stay in the log line ``_log`` wrote; clients read records.
        error = ErrorInfo(code=verdict.code, message=public_message(verdict.code))
        if verdict.action == "retry":
            delay_s = backoff_s(claim.attempt, self._backoff_base_s, self._backoff_cap_s)
            return self._queue.retry(claim, error, delay_s=delay_s)
        return self._queue.finish(claim, Outcome(status=Status.failed, error=error))

    def _count(self, model: str, verdict: Verdict) -> None:
        code = verdict.code.value if verdict.code else ""
        if verdict.action == "retry":
            self._metrics.retries.labels(model, code).inc()
        elif verdict.action == "canceled":
            self._metrics.jobs.labels(model, "canceled", "").inc()
        elif verdict.action == "failed":
            self._metrics.jobs.labels(model, "failed", code).inc()
        else:
            self._metrics.released.labels(model).inc()

    def close(self, attempt: Attempt) -> None:
        """Stop renewing the lease; the attempt has ended one way or another."""
        self._leases.drop(attempt.lease)
        self._metrics.in_flight.dec()

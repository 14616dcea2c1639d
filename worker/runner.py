"""The GPU side of one job: validate, then ``run_pipeline`` (load → extend the prompt → denoise →
decode), then hand over.

The post-processing side (encode → upload → finish) lives in ``worker.postprocess`` and may run
in its own thread while the next job denoises. Every stage starts with ``JobProgress.enter``, which
checks the cancel flag, the time limit, the claim's freshness and the stop signal. The denoising
stage's write is sent by a thread of the runner while the model starts (its answer is taken at the first
step), so a job reaches the model without waiting for a queue round trip.
"""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.core.catalog import Catalog, ModelSpec, mode_inputs
from foundation.core.contract import Stage, utcnow
from foundation.core.errors import ErrorCode, JobError
from foundation.core.resolve import ResolvedJob
from foundation.queue.base import Claim, WorkerQueue
from pipelines.runtime.previews import PreviewCadence, Previews
from worker.attempt import Attempt, HandOff, Settler
from worker.checkpoints import CheckpointSetup, JobCheckpoints
from worker.errors import JobInterrupted
from worker.faults import LocalFaults
from worker.lease import LeaseKeeper
from worker.logs import job_logger
from worker.metrics import WorkerMetrics
from worker.pipeline_run import RunHooks, run_pipeline
from worker.progress import JobProgress
from worker.resolutions import Resolutions
from worker.verdict import FaultKind

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.stores.base import ArtifactStore
    from pipelines.runtime.cache import ModelCache

__all__ = ["JobRunner"]

_DEFAULT_LIMIT_S = 3600.0


class JobRunner:
    def __init__(
        self,
        *,
        catalog: Catalog,
        queue: WorkerQueue,
        cache: ModelCache,
        leases: LeaseKeeper,
        settler: Settler,
        metrics: WorkerMetrics,
        faults: LocalFaults,
        stop_now: threading.Event,
        progress_interval_s: float,
        work_root: Path,
        store: ArtifactStore | None = None,
        checkpointing: CheckpointSetup | None = None,
        overlap_stage_write: bool = False,
        previews: PreviewCadence | None = None,
    ) -> None:
        self._catalog = catalog
        self._resolutions = Resolutions(catalog)
        self._queue = queue
        self._cache = cache
        self._leases = leases
        self._settler = settler
        self._metrics = metrics
        self._faults = faults
        self._stop_now = stop_now
        self._progress_interval_s = progress_interval_s
        self._work_root = work_root
        self._store = store
        self._checkpointing = checkpointing  # None: no denoising checkpoints (settings, or no store)
        self._previews = previews  # None: no live previews (settings)
        # Sends the denoising stage's write while the model starts (``JobProgress.enter``); its thread
        # is started here, not on the first job's pick-up.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="progress") if overlap_stage_write else None
        if self._writer is not None:
            self._writer.submit(int)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=False)

    def begin(self, claim: Claim) -> Attempt:
        """Hold the lease (renewed from now on) and bind the job to a logger."""
        spec = self._catalog.get(claim.model)
        lease = self._leases.hold(claim, spec.max_job_seconds if spec else _DEFAULT_LIMIT_S)
        progress = JobProgress(
            self._queue, lease, interval_s=self._progress_interval_s, stop_now=self._stop_now, writer=self._writer
        )
        self._metrics.in_flight.inc()
        waited_s = (utcnow() - claim.record.created_at).total_seconds()
        self._metrics.queue_wait.labels(claim.model).observe(max(0.0, waited_s))  # hosts' clocks may differ
        log = job_logger(claim.job_id, claim.model, claim.attempt)
        log.info("claimed", extra={"stage": "claimed"})
        return Attempt(claim=claim, lease=lease, progress=progress, log=log)

    def run_on_gpu(self, attempt: Attempt) -> HandOff | None:
        """Everything up to the decoded media; None when the attempt already ended (settled)."""
        try:
            job, spec = self.validate(attempt)
            image = self._input_image(job)
            resident = spec.id in self._cache.loaded()  # then its loading stage ends at once
            hooks = _AttemptHooks(
                attempt,
                self._metrics,
                spec,
                self._checkpointing,
                self._stop_now,
                resident=resident,
                previews=self._previews,
            )
            rendered = run_pipeline(self._cache, spec, job, hooks, image=image)
            # The model loaded and the device ran it: faults of either are over.
            self._faults.clear(spec.id, FaultKind.model_load, FaultKind.device)
            work_dir = Path(tempfile.mkdtemp(prefix=f"{attempt.job_id}-{attempt.claim.attempt}-", dir=self._work_root))
        except Exception as e:
            try:
                self._settler.settle(attempt, attempt.progress.ended_by(e))
            finally:
                self._settler.close(attempt)
            return None
        return HandOff(attempt, rendered, work_dir)

    def validate(self, attempt: Attempt) -> tuple[ResolvedJob, ModelSpec]:
        """Re-check the payload against the contract and this worker's catalog (coded rejections).

        No cancel poll: the claim read the flag a moment ago, and the first stage's write answers it."""
        attempt.progress.check()
        # The input image is the API's checked copy in the store (read by ``_input_image``); the request's URL
        # or data URI is not kept, and the record holds the ratio ``auto`` resolved to.
        return self._resolutions.resolve(attempt.claim)

    def _input_image(self, job: ResolvedJob) -> Image | None:
        """The job's stored input image, checked against its sha256 and fitted (None for text-only jobs)."""
        if job.image is None:
            if "image" in mode_inputs(job.mode):  # refused before any model loads: no retry can supply it
                raise JobError(ErrorCode.invalid_payload, f"a {job.mode} job without a stored input image")
            return None
        if self._store is None:
            raise JobError(ErrorCode.internal_error, "this runner has no artifact store to read input images from")
        from worker.input_image import load_input_image

        return load_input_image(self._store, job)


class _AttemptHooks(RunHooks):
    """A claimed attempt's side of a run: record, progress checks, denoising checkpoints, job log, metrics."""

    def __init__(
        self,
        attempt: Attempt,
        metrics: WorkerMetrics,
        spec: ModelSpec,
        checkpointing: CheckpointSetup | None,
        stop_now: threading.Event,
        *,
        resident: bool = False,
        previews: PreviewCadence | None = None,
    ) -> None:
        self._attempt = attempt
        self._previews = previews
        self._resident = resident  # the model was in the cache when the attempt began
        self._metrics = metrics
        self._spec = spec
        self._checkpointing = checkpointing
        self._stop_now = stop_now
        self._checkpoints: JobCheckpoints | None = None
        self.log = attempt.log

    def stage(self, name: Stage) -> AbstractContextManager[None]:
        # Denoising starts while its stage write is in flight: the first step takes the answer.
        instant = name is Stage.loading and self._resident
        return self._attempt.stage(self._metrics, name, instant=instant, overlap=name is Stage.denoising)

    def on_step(self, done: int, total: int) -> None:
        checkpoints = self._checkpoints
        if checkpoints is not None and (checkpoints.stop_requested or self._stop_now.is_set()):
            checkpoints.flush()  # the checkpoint of this step is what the next attempt resumes from
        self._attempt.progress.on_step(done, total)  # raises JobInterrupted once the worker stops now
        if checkpoints is not None and checkpoints.stop_requested:
            raise JobInterrupted(f"draining: cannot finish within the grace; checkpointed at step {done} of {total}")

    def checkpoints(self) -> JobCheckpoints | None:
        if self._checkpointing is None:
            return None
        if self._checkpoints is None:
            claim = self._attempt.claim
            self._checkpoints = self._checkpointing.for_attempt(
                claim.job_id, claim.model, self._spec.checkpoints, self._metrics, self._attempt.log
            )
        return self._checkpoints

    def previews(self) -> Previews | None:
        """Previews to the attempt's progress writes, unless the worker's setting or the request turned them off."""
        if self._previews is None or self._attempt.claim.record.parameters.preview is False:
            return None
        return Previews(self._attempt.progress.offer_preview, self._previews)

    def denoised(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.close()

    def model_loaded(self, model_id: str, seconds: float) -> None:
        self._metrics.model_load_seconds.labels(model_id).observe(seconds)

    def compiled(self, model_id: str, graphs: int) -> None:
        self._metrics.compiles_in_jobs.labels(model_id).inc(graphs)
        self.log.warning("compiled during the job: a shape the warm-up did not cover", extra={"graphs": graphs})

    def out_of_memory(self, stage: Stage) -> None:
        self._metrics.retries.labels(self._attempt.claim.model, "out_of_memory").inc()

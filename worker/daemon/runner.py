"""The GPU side of one job: validate → load → extend the prompt → denoise, then hand over.

The post-processing side (encode → upload → finish) lives in ``worker.postprocess`` and may run in
its own thread while the next job denoises. Every stage starts with ``JobProgress.enter``, which
checks the cancel flag, the time limit, the claim's freshness and the stop signal.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from worker.core.catalog import Catalog, ModelSpec
from worker.core.contract import MAX_SEED, CreateRequest, PromptExtension, Stage, parse_create_request
from worker.core.errors import is_out_of_memory
from worker.core.resolve import ResolvedJob, resolve
from worker.daemon.attempt import Attempt, Generated, Settler
from worker.daemon.lease import LeaseKeeper
from worker.daemon.logs import job_logger, log_stage
from worker.daemon.metrics import WorkerMetrics
from worker.daemon.progress import JobProgress
from worker.queue.base import Claim, JobQueue

if TYPE_CHECKING:
    from pipelines.adapter import Adapter
    from pipelines.cache import ModelCache
    from worker.core.media import Media

__all__ = ["JobRunner", "rebuild_request", "stage"]

_T = TypeVar("_T")
_DEFAULT_LIMIT_S = 3600.0


@contextmanager
def stage(attempt: Attempt, metrics: WorkerMetrics, name: Stage) -> Iterator[None]:
    """Enter a stage on the record, log one line when it ends and observe its duration."""
    attempt.progress.enter(name)
    started = time.perf_counter()
    with log_stage(attempt.log, name.value):
        yield
    metrics.stage_seconds.labels(attempt.claim.model, name.value).observe(time.perf_counter() - started)


def rebuild_request(claim: Claim) -> CreateRequest:
    """The record as a strict create request, so a worker re-checks what the API accepted.

    A record without a seed gets one derived from its id, so every attempt renders the same video.
    """
    record = claim.record
    params = record.parameters.model_dump(exclude_none=True)
    params.setdefault("seed", int.from_bytes(hashlib.sha256(record.id.encode()).digest()[:4]) % (MAX_SEED + 1))
    body = {
        "model": record.model,
        "mode": record.mode,
        "variant": record.variant,
        "parameters": params,
        "input": {"prompt": record.input.prompt},
    }
    return parse_create_request(body)


class JobRunner:
    def __init__(
        self,
        *,
        catalog: Catalog,
        queue: JobQueue,
        cache: ModelCache,
        leases: LeaseKeeper,
        settler: Settler,
        metrics: WorkerMetrics,
        stop_now: threading.Event,
        progress_interval_s: float,
        work_root: Path,
    ) -> None:
        self._catalog = catalog
        self._queue = queue
        self._cache = cache
        self._leases = leases
        self._settler = settler
        self._metrics = metrics
        self._stop_now = stop_now
        self._progress_interval_s = progress_interval_s
        self._work_root = work_root

    def begin(self, claim: Claim) -> Attempt:
        """Hold the lease (renewed from now on) and bind the job to a logger."""
        spec = self._catalog.get(claim.model)
        lease = self._leases.hold(claim, spec.max_job_seconds if spec else _DEFAULT_LIMIT_S)
        progress = JobProgress(self._queue, lease, interval_s=self._progress_interval_s, stop_now=self._stop_now)
        self._metrics.in_flight.inc()
        log = job_logger(claim.job_id, claim.model, claim.attempt)
        log.info("claimed", extra={"stage": "claimed"})
        return Attempt(claim=claim, lease=lease, progress=progress, log=log)

    def run_on_gpu(self, attempt: Attempt) -> Generated | None:
        """Everything up to the generated media; None when the attempt already ended (settled)."""
        try:
            job, spec = self.validate(attempt)
            adapter = self.load(attempt, spec)
            prompt_used, extension = self.extend_prompt(attempt, adapter, job)
            job = job.model_copy(update={"prompt": prompt_used})
            media, gpu_seconds = self.denoise(attempt, spec, job)
            work_dir = Path(tempfile.mkdtemp(prefix=f"{attempt.job_id}-{attempt.claim.attempt}-", dir=self._work_root))
        except Exception as e:
            try:
                self._settler.settle(attempt, e)
            finally:
                self._settler.close(attempt)
            return None
        return Generated(attempt, job, media, gpu_seconds, prompt_used, extension, work_dir)

    def validate(self, attempt: Attempt) -> tuple[ResolvedJob, ModelSpec]:
        """Re-check the payload against the contract and this worker's catalog (coded rejections)."""
        attempt.progress.check(poll_cancel=True)
        job, _hold = resolve(rebuild_request(attempt.claim), self._catalog)
        spec = self._catalog.get(job.model)
        assert spec is not None  # resolve() rejects unknown models
        return job, spec

    def load(self, attempt: Attempt, spec: ModelSpec) -> Adapter:
        with stage(attempt, self._metrics, Stage.loading):
            return self._with_oom_retry(attempt, lambda: self._load_model(spec))

    def extend_prompt(self, attempt: Attempt, adapter: Adapter, job: ResolvedJob) -> tuple[str, PromptExtension | None]:
        if not job.prompt_extend:
            return job.prompt, None
        from pipelines.prompt_extend import extend_or_fallback

        with stage(attempt, self._metrics, Stage.extending_prompt):
            prompt_used, extension = extend_or_fallback(adapter, job)
        if extension.status == "fallback":
            attempt.log.warning("prompt extension fell back to the original prompt", extra={"reason": extension.reason})
        return prompt_used, extension

    def denoise(self, attempt: Attempt, spec: ModelSpec, job: ResolvedJob) -> tuple[Media, float]:
        """Generate with step progress; GPU seconds are measured around the pipeline call."""
        started = time.perf_counter()

        def generate() -> Media:
            return self._load_model(spec).generate(job, attempt.progress.on_step)

        with stage(attempt, self._metrics, Stage.denoising):
            media = self._with_oom_retry(attempt, generate)
        return media, time.perf_counter() - started

    def _load_model(self, spec: ModelSpec) -> Adapter:
        loads_before = self._cache.load_count()
        started = time.perf_counter()
        adapter = self._cache.get(spec)
        if self._cache.load_count() != loads_before:
            self._metrics.model_load_seconds.labels(spec.id).observe(time.perf_counter() - started)
        return adapter

    def _with_oom_retry(self, attempt: Attempt, work: Callable[[], _T]) -> _T:
        """Out of memory: free every cached model and try once more; a second OOM fails the job.

        Retrying here rather than through the queue keeps the job on a worker whose memory was just
        freed, and a job that cannot fit never loops through the queue (``out_of_memory`` is terminal).
        """
        try:
            return work()
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            attempt.log.warning("out of memory: freeing the model cache and retrying once", extra={"stage": "oom"})
            self._metrics.retries.labels(attempt.claim.model, "out_of_memory").inc()
            self._cache.clear()
            _empty_cuda_cache()
        return work()


def _empty_cuda_cache() -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()

"""The post-GPU side of one job: encode → upload → finish, and the line that overlaps it with the GPU.

``PostProcessingLane`` runs post-processing in one background thread so encoding and uploading job N overlap
the denoising of job N+1. It is bounded: before handing over job N+1 the GPU thread waits for job N,
so at most one job is post-processed behind the GPU and host memory holds at most two clips. The
lease keeper keeps renewing the waiting job's lease meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.core.catalog import Catalog
from foundation.core.contract import Artifact, Money, Stage, Status, Usage
from foundation.core.errors import JobError, TransientError
from foundation.core.resolve import ResolvedJob, compute_price
from foundation.queue.base import Claim, Outcome, WorkerQueue
from foundation.stores.base import ArtifactStore, artifact_key, claim_tag
from pipelines.planning.mfu import achieved
from worker.attempt import Attempt, HandOff, Settler
from worker.checkpoints import delete_checkpoint
from worker.faults import LocalFaults
from worker.metrics import WorkerMetrics
from worker.verdict import FaultKind

if TYPE_CHECKING:
    from foundation.media.encoder import EncoderSettings
    from worker.pipeline_run import Rendered

__all__ = ["PostProcessingLane", "PostProcessor", "discard_objects", "final_price", "upload_artifacts"]

log = logging.getLogger("genworker.post")


def final_price(catalog: Catalog, job: ResolvedJob, hold: Money, output_seconds: Decimal) -> Money:
    """The price of the seconds delivered, never above the hold taken at create."""
    spec = catalog.models[job.model]
    variant = spec.modes[job.mode].variants[job.variant]
    price = compute_price(spec, variant, job.resolution, output_seconds, job.audio)
    return hold if Decimal(price.amount) > Decimal(hold.amount) else price


class PostProcessor:
    def __init__(
        self,
        *,
        catalog: Catalog,
        queue: WorkerQueue,
        store: ArtifactStore,
        encoder: EncoderSettings,
        settler: Settler,
        metrics: WorkerMetrics,
        faults: LocalFaults,
    ) -> None:
        self._catalog = catalog
        self._queue = queue
        self._store = store
        self._encoder = encoder
        self._settler = settler
        self._metrics = metrics
        self._faults = faults

    def run(self, handoff: HandOff) -> None:
        """Encode, upload and finish; any failure is settled. Never raises except ``FatalWorkerError``."""
        attempt = handoff.attempt
        try:
            stored = self.deliver(handoff)
            self.succeed(handoff, stored)
        except Exception as e:
            # The one catch-all of this line: it runs in the post-processing thread, which must outlive
            # any job. The settler classifies every exception (ours, ffmpeg's, a bug) into an outcome.
            self._settler.settle(attempt, e)
        finally:
            self._settler.close(attempt)

    def deliver(self, handoff: HandOff) -> list[Artifact]:
        """Encode and upload; the attempt's work directory is gone when this returns or raises.

        Removed before the attempt's terminal write, never after: whoever sees the record terminal
        (a client, an operator, a test) finds none of its files left on the worker's disk."""
        try:
            return self.upload(handoff, self.encode(handoff))
        finally:
            shutil.rmtree(handoff.work_dir, ignore_errors=True)

    def encode(self, handoff: HandOff) -> list[tuple[Artifact, Path]]:
        """Encode the clip (and its poster) into the attempt's work directory."""
        from foundation.media.encoder import encode_video

        job = handoff.rendered.job
        with handoff.attempt.stage(self._metrics, Stage.encoding):
            encoded = encode_video(
                handoff.rendered.media,
                keep_frames=job.keep_frames,
                width=job.width,
                height=job.height,
                out_dir=handoff.work_dir,
                settings=self._encoder,
            )
        # ffmpeg ran and the work disk took its output: faults of either are over.
        self._faults.clear(job.model, FaultKind.encoder, FaultKind.disk)
        handoff.attempt.progress.check()
        return encoded.artifacts()

    def upload(self, handoff: HandOff, files: list[tuple[Artifact, Path]]) -> list[Artifact]:
        """Upload under this claim's own keys (``artifact_key``): nobody else ever writes or deletes them.

        A cancel that arrived while the files went up is honoured: the cancel flag is read once more
        after the upload, right before the finish, and the objects just stored are deleted before the
        attempt ends ``canceled`` (a canceled job points at no artifact)."""
        with handoff.attempt.stage(self._metrics, Stage.uploading):
            stored = upload_artifacts(self._store, handoff.attempt.claim, files)
        self._faults.clear(handoff.rendered.job.model, FaultKind.backend)  # the store answered again
        try:
            handoff.attempt.progress.check(poll_cancel=True)
        except Exception:  # kept broad: whatever ends the attempt here, no record will name these objects
            discard_objects(self._store, stored)
            raise
        return stored

    def succeed(self, handoff: HandOff, artifacts: list[Artifact]) -> None:
        rendered, attempt = handoff.rendered, handoff.attempt
        job = rendered.job
        seconds = Decimal(job.keep_frames) / Decimal(job.fps)
        outcome = Outcome(
            status=Status.succeeded,
            artifacts=artifacts,
            usage=Usage(output_seconds=float(seconds), gpu_seconds=round(rendered.gpu_seconds, 3)),
            price=final_price(self._catalog, job, attempt.claim.record.price_hold, seconds),
            actual_prompt=job.prompt,
            prompt_extension=rendered.extension,
            prompt_tokens=rendered.prompt_tokens,
            resumed_from_step=rendered.resumed_from_step,
        )
        if self._queue.finish(attempt.claim, outcome):
            elapsed_ms = round((time.monotonic() - attempt.started) * 1000, 1)
            attempt.log.info("succeeded", extra={"stage": "done", "elapsed_ms": elapsed_ms})
            self._metrics.jobs.labels(job.model, "succeeded", "").inc()
            delete_checkpoint(self._store, attempt.job_id, attempt.log)
            self.observe_flops(rendered, attempt)
        else:
            attempt.log.info("queue refused the success: the claim was stale", extra={"stage": "done"})
            self._metrics.abandoned.labels(job.model).inc()
            discard_objects(self._store, artifacts)

    def observe_flops(self, rendered: Rendered, attempt: Attempt) -> None:
        """Achieved TFLOP/s and MFU of the job's denoising (off the GPU thread: counting may take a second)."""
        flops = rendered.flops
        if flops is None or flops.calls == 0 or rendered.denoise_seconds <= 0:
            return
        try:
            total = flops.total()
        except Exception as e:  # kept broad: a metric must never fail a job that succeeded
            attempt.log.warning("could not count the denoising FLOPs: %s", e)
            return
        tflops, mfu = achieved(total, rendered.denoise_seconds, rendered.device)
        model = rendered.job.model
        self._metrics.denoise_flops.labels(model).inc(total)
        self._metrics.denoise_tflops.labels(model).observe(tflops)
        if mfu is not None:
            self._metrics.denoise_mfu.labels(model).observe(mfu)
        attempt.log.info("denoising throughput", extra={"tflops": round(tflops, 3), "mfu": mfu})


def upload_artifacts(store: ArtifactStore, claim: Claim, files: list[tuple[Artifact, Path]]) -> list[Artifact]:
    """Store ``files`` under ``claim``'s keys; on failure remove those already stored, then re-raise."""
    tag = claim_tag(claim.token, claim.record.updated_at)
    stored: list[Artifact] = []
    try:
        for artifact, path in files:
            key = artifact_key(claim.job_id, claim.attempt, tag, path.name)
            obj = store.put_file(key, path, content_type=artifact.content_type, sha256=artifact.sha256)
            stored.append(artifact.model_copy(update={"key": obj.key, "bytes": obj.bytes, "sha256": obj.sha256}))
    except Exception:
        # No record will reference this claim's objects. Best effort: a store that cannot delete now
        # raises one of its two error types, and the first error is the one worth reporting.
        _delete_all(store, [a.key for a in stored])
        raise
    return stored


def discard_objects(store: ArtifactStore, artifacts: list[Artifact]) -> None:
    """Delete a claim's objects after the queue refused its finish (the claim was superseded). Safe:
    the keys are this claim's own (``claim_tag``), so no other holder's record can point at them, and a
    refusal means this finish was never applied (a re-sent one that was answers "applied", i.e. True).
    Best effort: a store that cannot delete now leaves orphans, never an error."""
    _delete_all(store, [a.key for a in artifacts])


def _delete_all(store: ArtifactStore, object_keys: list[str]) -> None:
    for key in object_keys:
        with contextlib.suppress(JobError, TransientError):
            store.delete(key)


class PostProcessingLane:
    """Post-processing inline (``overlap=False``) or one job behind the GPU in a background thread."""

    def __init__(self, processor: PostProcessor, *, overlap: bool) -> None:
        self._processor = processor
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="postprocess") if overlap else None
        self._pending: Future[None] | None = None
        self._lock = threading.Lock()

    def submit(self, handoff: HandOff) -> None:
        """Hand ``handoff`` over; blocks while the previous job is still post-processing (the bound)."""
        if self._pool is None:
            self._processor.run(handoff)
            return
        self.wait()
        with self._lock:
            self._pending = self._pool.submit(self._processor.run, handoff)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the job in post-processing; True when none is left. Re-raises a fatal error."""
        with self._lock:
            pending = self._pending
        if pending is None:
            return True
        pending.result(timeout=timeout_s)
        with self._lock:
            if self._pending is pending:
                self._pending = None
        return True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=False)

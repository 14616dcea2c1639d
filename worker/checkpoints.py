"""Denoising checkpoints of one attempt in the artifact store: the worker's side of ``pipelines.runtime.resume``.

One object per generation, ``generations/<id>/checkpoint/denoise.ckpt`` (``checkpoint_key``), replaced by
every write: an S3 PUT and the local store's rename are atomic, so a reader sees the previous checkpoint or
the next, never half of one. Any attempt of the generation may resume from it (its fingerprint decides);
it is deleted when the generation ends, and the sweeper removes one a killed worker left behind.

- **Cadence**: the catalog's ``checkpoints`` (every N steps and/or T seconds of denoising). The GPU thread
  only copies tensors to the host (inside the adapter); serializing and uploading run on a writer thread,
  and a newer checkpoint replaces one still waiting (only the latest matters).
- **Drain** (SIGTERM, or the preemption file): at each step the job is judged against the grace left:
  if its remaining denoising (steps left x its mean step time) plus ``drain_finish_margin_s`` does not fit,
  it checkpoints now, waits for the write, and stops (``JobInterrupted``: released without using an
  attempt); another worker resumes it from that step. Past the grace (``stop_now``) the step in flight is
  checkpointed the same way before the job is released.
- **Resume**: ``load`` reads the stored checkpoint; one that does not parse, or that the adapter refuses
  (another recipe, catalog entry, prompt, seed, library or loop version), is counted by reason and ignored.
  One that parses and matches but cannot be restored (``CheckpointMismatch``: its contents do not fit the
  loop) is ``discard``ed: deleted, logged and counted (``mismatch``), and the run starts again from step 0
  in this attempt (``worker.pipeline_run``), so it uses no attempt of the job.
- A failed write is a warning, never a failure of the job: a checkpoint only saves time.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.core.errors import BackendUnavailable, GenworkerError
from foundation.stores.base import ARTIFACTS_ROOT
from pipelines.errors import CheckpointCorrupt
from pipelines.runtime.resume import DenoiseCheckpoint

if TYPE_CHECKING:
    from foundation.core.catalog import CheckpointPolicy
    from foundation.stores.base import ArtifactStore
    from worker.logs import JobLogger
    from worker.metrics import WorkerMetrics

__all__ = ["CheckpointSetup", "DrainClock", "JobCheckpoints", "checkpoint_key", "delete_checkpoint"]

# A checkpoint larger than this is not read back (refused as corrupt): Wan 14B 720p's is ~80 MB.
MAX_CHECKPOINT_BYTES = 4 << 30
CONTENT_TYPE = "application/octet-stream"


def checkpoint_key(job_id: str) -> str:
    """``generations/<id>/checkpoint/denoise.ckpt``: one per generation, shared by its attempts."""
    return f"{ARTIFACTS_ROOT}{job_id}/checkpoint/denoise.ckpt"


def delete_checkpoint(store: ArtifactStore, job_id: str, log: JobLogger) -> None:
    """Remove the generation's checkpoint (it ended). Best effort: the sweeper removes what this leaves."""
    try:
        store.delete(checkpoint_key(job_id))
    except Exception as e:  # kept broad: a store error here must not change the job's outcome
        log.warning("could not delete the checkpoint: %s", e)


class DrainClock:
    """What the worker's shutdown says: draining, stopping now, and when the drain grace ends; and the clock
    that grace is read on, which also times the steps and the checkpoint cadence (tests step their own)."""

    def __init__(
        self,
        draining: threading.Event,
        stop_now: threading.Event,
        deadline: Callable[[], float | None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.draining = draining
        self.stop_now = stop_now
        self.deadline = deadline  # end of the grace on ``clock``; None until a drain starts
        self.clock = clock

    def seconds_left(self) -> float | None:
        deadline = self.deadline()
        return None if deadline is None else deadline - self.clock()


@dataclass(frozen=True)
class CheckpointSetup:
    """What every attempt's checkpoints share: the store, the drain, and the finish margin (settings)."""

    store: ArtifactStore
    drain: DrainClock
    finish_margin_s: float
    work_root: Path

    def for_attempt(
        self, job_id: str, model: str, policy: CheckpointPolicy, metrics: WorkerMetrics, log: JobLogger
    ) -> JobCheckpoints:
        return JobCheckpoints(
            self.store,
            job_id,
            model,
            policy,
            metrics=metrics,
            log=log,
            drain=self.drain,
            finish_margin_s=self.finish_margin_s,
            work_root=self.work_root,
        )


class JobCheckpoints:
    """``pipelines.runtime.resume.Checkpoints`` for one attempt, on the artifact store."""

    def __init__(
        self,
        store: ArtifactStore,
        job_id: str,
        model: str,
        policy: CheckpointPolicy,
        *,
        metrics: WorkerMetrics,
        log: JobLogger,
        drain: DrainClock,
        finish_margin_s: float,
        work_root: Path,
    ) -> None:
        self._store = store
        self._key = checkpoint_key(job_id)
        self._model = model
        self._policy = policy
        self._metrics = metrics
        self._log = log
        self._drain = drain
        self._finish_margin_s = finish_margin_s
        self._work_root = work_root
        self._writer = _Writer(self._write, log)
        self._last_saved_step = 0
        self._last_saved_at = drain.clock()
        self._first_live: tuple[int, float] | None = None  # (step, time) of the first live step seen
        self._mean_step_s: float | None = None
        self.resumed_from_step: int | None = None
        self.stop_requested = False  # a drain decided this job cannot finish in time: stop at this step
        self._discarded = False  # the stored checkpoint failed its restore: not read again until a save

    # ------------------------------------------------------------------------------ Checkpoints protocol

    def load(self) -> DenoiseCheckpoint | None:
        self._writer.flush(timeout_s=60.0)  # a retry in this attempt (after OOM) reads the latest write
        if self._discarded:
            return None  # its delete may have failed: never restore it twice
        try:
            data = self._store.read_bytes(self._key, max_bytes=MAX_CHECKPOINT_BYTES)
        except (BackendUnavailable, GenworkerError) as e:
            self.refused("unreadable", detail=str(e))
            return None
        if data is None:
            return None
        try:
            return DenoiseCheckpoint.from_bytes(data)
        except CheckpointCorrupt as e:
            self.refused("corrupt", detail=str(e))
            return None

    def refused(self, reason: str, detail: str = "") -> None:
        self._metrics.checkpoints_refused.labels(self._model, reason).inc()
        self._log.warning(
            "stored checkpoint not used (%s): starting from step 0", reason, extra={"reason": reason, "detail": detail}
        )

    def discard(self, detail: str) -> None:
        """The checkpoint ``load`` handed out did not fit the loop: delete it and start this attempt's run
        over. The job keeps its attempt; only the replay up to the checkpoint was wasted."""
        self._discarded = True
        self.resumed_from_step = None
        self._last_saved_step, self._first_live, self._mean_step_s = 0, None, None
        self._metrics.checkpoints_refused.labels(self._model, "mismatch").inc()
        self._log.warning(
            "stored checkpoint does not fit the loop: deleted, starting from step 0",
            extra={"reason": "mismatch", "detail": detail[:500]},
        )
        try:
            self._store.delete(self._key)
        except Exception as e:  # kept broad: a store error must not fail the job; load() skips it anyway
            self._log.warning("could not delete the unusable checkpoint: %s", e)

    def resumed(self, step: int, total: int) -> None:
        self.resumed_from_step = step
        self._last_saved_step = step
        self._metrics.resumes.labels(self._model).inc()
        self._log.info("resumed from a checkpoint", extra={"step": step, "steps": total})

    def due(self, step: int, total: int) -> bool:
        now = self._drain.clock()
        self._time_step(step, now)
        if self._drain.stop_now.is_set():
            return True  # released right after this step: keep it
        if self._drain.draining.is_set() and not self._fits_grace(step, total):
            self.stop_requested = True
            return True
        policy = self._policy
        if policy.every_steps is not None and step - self._last_saved_step >= policy.every_steps:
            return True
        return policy.every_s is not None and now - self._last_saved_at >= policy.every_s

    def save(self, checkpoint: DenoiseCheckpoint) -> None:
        self._discarded = False  # the next load reads this one (the writer is flushed first)
        self._last_saved_step = checkpoint.step
        self._last_saved_at = self._drain.clock()
        self._writer.submit(checkpoint)

    # ------------------------------------------------------------------------------------ the worker's

    def flush(self) -> bool:
        """Wait for the pending write (a stop keeps the checkpoint it just took), within the grace left."""
        left = self._drain.seconds_left()
        return self._writer.flush(timeout_s=min(60.0, max(1.0, left if left is not None else 60.0)))

    def close(self) -> None:
        """The denoising ended: let the last write land, count what a resume saved, stop the writer."""
        self._writer.flush(timeout_s=30.0)
        self._writer.close()
        if self.resumed_from_step and self._mean_step_s is not None:
            self._metrics.resume_saved_seconds.labels(self._model).inc(self.resumed_from_step * self._mean_step_s)

    def _time_step(self, step: int, now: float) -> None:
        if self._first_live is None:
            self._first_live = (step, now)
        elif step > self._first_live[0]:
            self._mean_step_s = (now - self._first_live[1]) / (step - self._first_live[0])

    def _fits_grace(self, step: int, total: int) -> bool:
        left = self._drain.seconds_left()
        if left is None:
            return True
        remaining = (total - step) * (self._mean_step_s or 0.0)
        return remaining + self._finish_margin_s <= left

    def _write(self, checkpoint: DenoiseCheckpoint) -> None:
        started = time.perf_counter()
        data = checkpoint.to_bytes()
        with tempfile.NamedTemporaryFile(dir=self._work_root, prefix="checkpoint-", suffix=".part") as f:
            f.write(data)
            f.flush()
            self._store.put_file(self._key, Path(f.name), content_type=CONTENT_TYPE)
        seconds = time.perf_counter() - started
        self._metrics.checkpoints.labels(self._model).inc()
        self._metrics.checkpoint_bytes.labels(self._model).inc(len(data))
        self._metrics.checkpoint_seconds.labels(self._model).observe(seconds)
        self._log.info(
            "checkpoint written",
            extra={"step": checkpoint.step, "bytes": len(data), "elapsed_ms": round(seconds * 1000, 1)},
        )


class _Writer:
    """One background thread writing the newest submitted checkpoint; a newer one replaces a waiting one."""

    def __init__(self, write: Callable[[DenoiseCheckpoint], None], log: JobLogger) -> None:
        self._write = write
        self._log = log
        self._cond = threading.Condition()
        self._pending: DenoiseCheckpoint | None = None
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, checkpoint: DenoiseCheckpoint) -> None:
        with self._cond:
            self._pending = checkpoint
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, *, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout=timeout_s)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                checkpoint, self._pending, self._busy = self._pending, None, True
            try:
                self._write(checkpoint)
            except Exception as e:  # kept broad: a failed checkpoint costs a resume, never the job
                self._log.warning("checkpoint write failed: %s", e, extra={"step": checkpoint.step})
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

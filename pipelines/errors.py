"""The model layer's exceptions.

Exception tree (the classes of this module, under their branches from ``foundation.core.errors``)::

    GenworkerError
    ├── JobError
    │   └── ModelLoadError             unknown adapter, missing weights, a failing load (``model_load_failed``)
    ├── PromptExtendError              extension failed; the worker uses the original prompt
    ├── ConfigError
    │   └── ParallelSetupError         the job's process group cannot be formed as configured (also
    │                                  ``RuntimeError``)
    └── StoredDataError
        ├── CheckpointError            a denoising checkpoint that is not used: the job runs on without it
        │   ├── CheckpointCorrupt      bytes that are no denoising checkpoint this version reads (also
        │   │   │                      ``ValueError``)
        │   │   └── CheckpointMismatch a checkpoint of this job that does not fit its loop (shapes, dtypes)
        │   └── UnsupportedState       a scheduler state a checkpoint cannot carry (also ``TypeError``)
        └── CompileCacheRefused        a compile cache blob not sealed by this worker's key, or unsafe (also
                                       ``ValueError``)

    Signal
    ├── FollowerStopped                rank 0 stopped the job at this step: a follower rank leaves its denoise
    └── WarmupDone                     a compile warm-up denoise ran what it had to: it leaves the loop early
"""

from __future__ import annotations

from foundation.core.errors import ConfigError, ErrorCode, GenworkerError, JobError, Signal, StoredDataError

__all__ = [
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointMismatch",
    "CompileCacheRefused",
    "FollowerStopped",
    "ModelLoadError",
    "ParallelSetupError",
    "PromptExtendError",
    "UnsupportedState",
    "WarmupDone",
]


class ModelLoadError(JobError):
    """A model that cannot be loaded: unknown adapter, missing weights, or a failing ``from_pretrained``."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.model_load_failed, message)


class PromptExtendError(GenworkerError):
    """Prompt extension failed (empty output, timed out, no enhancer); the worker falls back."""


class ParallelSetupError(ConfigError, RuntimeError):
    """The process group cannot be formed as configured (not started by torchrun, wrong size)."""


class FollowerStopped(Signal):
    """Rank 0 stopped the job at this step (cancel, drain, an error in its step callback): a follower rank
    leaves its denoising loop and waits for the next order."""


class CheckpointError(StoredDataError):
    """A denoising checkpoint that is not used: unreadable, not fitting the loop, or one a scheduler's state
    cannot go into. The job runs on without it (from step 0, or without checkpoints)."""


class CheckpointCorrupt(CheckpointError, ValueError):
    """The bytes are not a checkpoint this version can read."""


class CheckpointMismatch(CheckpointCorrupt):
    """A checkpoint that parses and carries this job's fingerprint, but whose contents do not fit the loop
    it is restored into: another count of scheduler steps or outputs, a tensor of another shape or dtype, a
    scheduler state laid out otherwise, or a restore that failed. The job starts over from step 0."""


class UnsupportedState(CheckpointError, TypeError):
    """A scheduler holds state a checkpoint cannot carry (the job runs on, without checkpoints)."""


class WarmupDone(Signal):
    """A compile warm-up denoise ran every denoiser it had to (``pipelines.runtime.compile``): raised from its step
    callback to leave the denoising loop before the schedule ends, and caught by the warm-up. Control flow, not a
    failure: no job sees it."""


class CompileCacheRefused(StoredDataError, ValueError):
    """A compile cache blob that is not loaded: not sealed by this worker's key for its cache key, of a layout this
    torch does not write, or naming an artifact like a path. The model compiles afresh."""

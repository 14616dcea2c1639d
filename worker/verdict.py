"""How an exception that ends a job attempt is turned into an outcome: infrastructure errors kept apart
from model errors, this worker's own faults kept apart from the job's, and a stable machine-readable
code on every failure.

=========================================  ==========================================================
raised                                     outcome
=========================================  ==========================================================
``JobCanceled``                            ``canceled``
``StaleClaim``                             nothing: another attempt owns the job now
``JobInterrupted``                         ``queue.release``: the worker is stopping, re-deliver now
``FatalWorkerError``                       ``queue.release`` and the worker stops
``EncoderUnavailable``                     ``release_local`` ``encoder``: ffmpeg cannot run here
``WorkDiskFull``, or ENOSPC raised raw     ``release_local`` ``disk``: the work disk is full
  (or under a ``ModelLoadError``)
CUDA device busy/unavailable/absent,       ``release_local`` ``device``: the GPU is unusable here (a
  raw or under a ``ModelLoadError``        device-side assert is not: it is the job's, see below)
``BackendUnavailable``: the store or the   ``release_local`` ``backend``: not the job's doing, and a
  queue did not answer during the job      retry would only burn its attempts while the outage
                                           lasts; the worker stops claiming until its backoff ends
``ModelLoadError``                         ``release_local`` ``model_load``: the model does not load
                                           here (after N distinct workers: ``failed``
                                           ``model_load_failed``, decided by the settler)
``JobError(code)``                         ``failed`` with ``code``, no retry
``RequestRejected`` (bad queue payload)    ``failed`` ``invalid_payload``
``TransientError(code)``                   ``queue.retry`` with jittered exponential backoff (dead letter
                                           at the attempt limit, keeping ``code``)
out of memory (after its one local retry)  ``failed`` ``out_of_memory``
anything else (model code raised)          ``failed`` ``pipeline_error`` with a short message
=========================================  ==========================================================

``release_local`` gives the job back without using up an attempt, and the worker stops claiming the
model (``model_load``) or everything (the other kinds) for a while: another worker takes the job.
Typed errors from a seam (``JobError`` other than a load failure, ``TransientError``) are taken as
the seam classified them: a full artifact store is the store's ``upload_failed``, not a local disk.
"""

from __future__ import annotations

import errno
import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from foundation.core.errors import (
    BackendUnavailable,
    ErrorCode,
    FatalWorkerError,
    JobCanceled,
    JobError,
    RequestRejected,
    TransientError,
    WorkerFault,
    is_out_of_memory,
    short_message,
)
from foundation.media.errors import EncoderUnavailable, WorkDiskFull
from pipelines.errors import ModelLoadError
from worker.errors import JobInterrupted, StaleClaim

__all__ = ["FaultKind", "Verdict", "backoff_s", "classify"]

Action = Literal["canceled", "failed", "retry", "abandon", "release", "release_local", "fatal"]

# How CUDA says the device cannot be used by this process at all (another process holds it in
# exclusive mode, the driver lost it, none is visible). Job-made CUDA errors (device-side assert,
# illegal memory access) are not in this list: they fail the job.
_DEVICE_UNUSABLE = (
    "busy or unavailable",
    "no cuda-capable device is detected",
    "cuda driver version is insufficient",
    "cudaerrordevicesunavailable",
    "cudaerrornodevice",
    "uncorrectable ecc error",
)


class FaultKind(StrEnum):
    """What of this worker's own is broken. Only ``model_load`` is limited to one model."""

    model_load = "model_load"
    encoder = "encoder"
    backend = "backend"  # the artifact store (or the queue) did not answer
    disk = "disk"
    device = "device"

    @property
    def worker_wide(self) -> bool:
        return self is not FaultKind.model_load


@dataclass(frozen=True)
class Verdict:
    action: Action
    code: ErrorCode | None = None
    message: str = ""
    fault: FaultKind | None = None  # set for ``release_local``


def classify(exc: BaseException) -> Verdict:
    """The outcome ``exc`` prescribes (the table above); pure: reads only the exception and its causes."""
    if isinstance(exc, StaleClaim):
        return Verdict("abandon")
    if isinstance(exc, JobInterrupted):
        return Verdict("release", message=short_message(exc))
    if isinstance(exc, FatalWorkerError):
        return Verdict("fatal", ErrorCode.internal_error, short_message(exc))
    if isinstance(exc, JobCanceled):
        return Verdict("canceled", message=exc.message)
    if isinstance(exc, BackendUnavailable):
        return Verdict("release_local", exc.code, short_message(exc), FaultKind.backend)
    local = _local_fault(exc)
    if local is not None:
        code = exc.code if isinstance(exc, JobError | WorkerFault) else ErrorCode.internal_error
        return Verdict("release_local", code, short_message(exc), local)
    if isinstance(exc, JobError):
        return Verdict("failed", exc.code, exc.message)
    if isinstance(exc, RequestRejected):
        return Verdict("failed", ErrorCode.invalid_payload, f"{exc.code.value}: {exc.message}")
    if isinstance(exc, TransientError):
        return Verdict("retry", exc.code, exc.message)
    if is_out_of_memory(exc):
        return Verdict("failed", ErrorCode.out_of_memory, short_message(exc))
    return Verdict("failed", ErrorCode.pipeline_error, f"{type(exc).__name__}: {short_message(exc)}")


def _local_fault(exc: BaseException) -> FaultKind | None:
    if isinstance(exc, EncoderUnavailable):
        return FaultKind.encoder
    if isinstance(exc, WorkDiskFull):
        return FaultKind.disk
    if isinstance(exc, (JobError, TransientError, RequestRejected)) and not isinstance(exc, ModelLoadError):
        return None  # a seam already said whose fault it is
    for cause in _chain(exc):
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return FaultKind.disk
        if isinstance(cause, RuntimeError) and any(s in str(cause).lower() for s in _DEVICE_UNUSABLE):
            return FaultKind.device
    return FaultKind.model_load if isinstance(exc, ModelLoadError) else None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (``raise ... from``, else the exception being handled), cycles cut."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def backoff_s(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Delay of the retry after ``attempt`` (1-based): uniform in ``[c/2, c]`` ("equal jitter"), where
    ``c = min(cap_s, base_s * 2**(attempt - 1))``.

    The random half spreads the jobs that failed together (one Redis or S3 blip fails every job in
    flight on every worker) over ``c/2`` instead of re-delivering them all at the same instant; the
    fixed half keeps a retry from landing at once on a backend that is still down. The client's retries
    have the same shape (``genworker_client.retry.backoff_s``); the two cannot share code because the
    worker does not import the client package. ``rng`` is for tests; by default the module generator.
    """
    try:
        ceiling = float(min(cap_s, base_s * 2.0 ** max(0, attempt - 1)))
    except OverflowError:
        ceiling = float(cap_s)
    draw = rng.uniform if rng is not None else random.uniform
    return ceiling / 2.0 + draw(0.0, ceiling / 2.0)

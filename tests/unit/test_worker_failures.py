"""Error classification: every exception that can end an attempt maps to one outcome and code."""

from __future__ import annotations

import errno
import random

import pytest
import torch

from foundation.core.errors import (
    ErrorCode,
    FatalWorkerError,
    JobCanceled,
    JobError,
    RequestRejected,
    TransientError,
    is_out_of_memory,
    short_message,
)
from foundation.media.errors import EncoderUnavailable, WorkDiskFull
from pipelines.errors import ModelLoadError
from worker.errors import JobInterrupted, StaleClaim
from worker.verdict import FaultKind, backoff_s, classify


@pytest.mark.parametrize(
    ("exc", "action", "code"),
    [
        (JobCanceled(), "canceled", None),
        (JobError(ErrorCode.timeout, "too long"), "failed", ErrorCode.timeout),
        (JobError(ErrorCode.encode_failed, "ffmpeg said no"), "failed", ErrorCode.encode_failed),
        (RequestRejected(ErrorCode.model_not_found, "no such model", "model"), "failed", ErrorCode.invalid_payload),
        (TransientError(ErrorCode.upload_failed, "store down"), "retry", ErrorCode.upload_failed),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "failed", ErrorCode.out_of_memory),
        (RuntimeError("CUDA error: out of memory"), "failed", ErrorCode.out_of_memory),
        (ValueError("shapes do not match"), "failed", ErrorCode.pipeline_error),
        (StaleClaim("gone"), "abandon", None),
        (JobInterrupted("stopping"), "release", None),
        (FatalWorkerError("device lost"), "fatal", ErrorCode.internal_error),
    ],
)
def test_classify(exc: BaseException, action: str, code: ErrorCode | None) -> None:
    verdict = classify(exc)
    assert verdict.action == action
    assert verdict.code == code


def _caused(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (ModelLoadError("weights path '/nope' does not exist"), FaultKind.model_load),
        (EncoderUnavailable("cannot start ffmpeg: No such file"), FaultKind.encoder),
        (WorkDiskFull("ffmpeg ran out of disk space"), FaultKind.disk),
        (_enospc(), FaultKind.disk),  # the work dir or the audio file, raised raw
        (_caused(ModelLoadError("loading failed"), _enospc()), FaultKind.disk),
        (RuntimeError("CUDA error: all CUDA-capable devices are busy or unavailable"), FaultKind.device),
        (RuntimeError("Found no NVIDIA driver: no CUDA-capable device is detected"), FaultKind.device),
        (
            _caused(
                ModelLoadError("loading failed"), RuntimeError("CUDA-capable device(s) is/are busy or unavailable")
            ),
            FaultKind.device,
        ),
    ],
)
def test_faults_of_the_worker_release_the_job_locally(exc: BaseException, fault: FaultKind) -> None:
    verdict = classify(exc)
    assert (verdict.action, verdict.fault) == ("release_local", fault)
    assert fault.worker_wide is (fault is not FaultKind.model_load)


@pytest.mark.parametrize(
    ("exc", "action", "code"),
    [
        # A device-side assert is the job's (an index out of range in model code), not the device's.
        (RuntimeError("CUDA error: device-side assert triggered"), "failed", ErrorCode.pipeline_error),
        # ffmpeg refusing this job's input stays the job's failure.
        (
            JobError(ErrorCode.encode_failed, "ffmpeg failed (exit 1): Conversion failed!"),
            "failed",
            ErrorCode.encode_failed,
        ),
        # The store translated its full disk at its seam: that classification stands.
        (_caused(TransientError(ErrorCode.upload_failed, "no space"), _enospc()), "retry", ErrorCode.upload_failed),
        (_caused(JobError(ErrorCode.timeout, "too long"), _enospc()), "failed", ErrorCode.timeout),
        (OSError(errno.EACCES, "Permission denied"), "failed", ErrorCode.pipeline_error),
    ],
)
def test_job_made_errors_are_not_local_faults(exc: BaseException, action: str, code: ErrorCode) -> None:
    verdict = classify(exc)
    assert (verdict.action, verdict.code, verdict.fault) == (action, code, None)


def test_cancel_is_not_reported_as_a_failure_although_it_is_a_job_error() -> None:
    # JobCanceled subclasses JobError: the order of the checks decides, and a cancel must win.
    assert isinstance(JobCanceled(), JobError)
    assert classify(JobCanceled()).action == "canceled"


def test_pipeline_error_message_is_short_and_names_the_exception() -> None:
    verdict = classify(ValueError("x" * 5000 + "\nsecond line"))
    assert verdict.message.startswith("ValueError: ")
    assert len(verdict.message) <= 320
    assert "second line" not in verdict.message


def test_rejection_keeps_the_original_code_in_the_message() -> None:
    verdict = classify(RequestRejected(ErrorCode.unsupported_parameter, "no audio here", "parameters.audio"))
    assert verdict.message == "unsupported_parameter: no audio here"


def test_out_of_memory_detection() -> None:
    assert is_out_of_memory(torch.OutOfMemoryError("boom"))
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate"))
    assert not is_out_of_memory(RuntimeError("expected scalar type Float"))
    assert not is_out_of_memory(ValueError("out of memory"))  # only the allocator's RuntimeError counts


def test_short_message_of_an_empty_exception_is_its_type() -> None:
    assert short_message(KeyError()) == "KeyError"


class _Top(random.Random):
    """An rng pinned to the top of every range: each delay equals its ceiling."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 2.0), (2, 4.0), (3, 8.0), (10, 60.0), (5000, 60.0)])
def test_backoff_doubles_and_is_capped(attempt: int, ceiling: float) -> None:
    assert backoff_s(attempt, base_s=2.0, cap_s=60.0, rng=_Top()) == ceiling
    assert ceiling / 2 <= backoff_s(attempt, base_s=2.0, cap_s=60.0) <= ceiling

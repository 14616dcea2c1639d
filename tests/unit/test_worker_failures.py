"""Error classification: every exception that can end an attempt maps to one outcome and code."""

from __future__ import annotations

import pytest
import torch

from worker.core.errors import (
    ErrorCode,
    FatalWorkerError,
    JobCanceled,
    JobError,
    JobInterrupted,
    RequestRejected,
    StaleClaim,
    TransientError,
    is_out_of_memory,
    short_message,
)
from worker.daemon.verdict import backoff_s, classify


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


@pytest.mark.parametrize(("attempt", "expected"), [(1, 2.0), (2, 4.0), (3, 8.0), (10, 60.0)])
def test_backoff_doubles_and_is_capped(attempt: int, expected: float) -> None:
    assert backoff_s(attempt, base_s=2.0, cap_s=60.0) == expected

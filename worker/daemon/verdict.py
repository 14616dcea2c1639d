"""How an exception that ends a job attempt is turned into an outcome: infrastructure errors kept apart
from model errors, and a stable machine-readable code on every failure.

=========================================  ==========================================================
raised                                     outcome
=========================================  ==========================================================
``JobCanceled``                            ``canceled``
``JobError(code)``                         ``failed`` with ``code``, no retry
``RequestRejected`` (bad queue payload)    ``failed`` ``invalid_payload``
``TransientError(code)``                   ``queue.retry`` with exponential backoff (dead letter at the
                                           attempt limit, keeping ``code``)
out of memory (after its one local retry)  ``failed`` ``out_of_memory``
``StaleClaim``                             nothing: another attempt owns the job now
``JobInterrupted``                         ``queue.release``: the worker is stopping, re-deliver now
``FatalWorkerError``                       ``queue.release`` and the worker stops
anything else (model code raised)          ``failed`` ``pipeline_error`` with a short message
=========================================  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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

__all__ = ["Verdict", "backoff_s", "classify"]

Action = Literal["canceled", "failed", "retry", "abandon", "release", "fatal"]


@dataclass(frozen=True)
class Verdict:
    action: Action
    code: ErrorCode | None = None
    message: str = ""


def classify(exc: BaseException) -> Verdict:
    if isinstance(exc, StaleClaim):
        return Verdict("abandon")
    if isinstance(exc, JobInterrupted):
        return Verdict("release", message=short_message(exc))
    if isinstance(exc, FatalWorkerError):
        return Verdict("fatal", ErrorCode.internal_error, short_message(exc))
    if isinstance(exc, JobCanceled):
        return Verdict("canceled", message=exc.message)
    if isinstance(exc, JobError):
        return Verdict("failed", exc.code, exc.message)
    if isinstance(exc, RequestRejected):
        return Verdict("failed", ErrorCode.invalid_payload, f"{exc.code.value}: {exc.message}")
    if isinstance(exc, TransientError):
        return Verdict("retry", exc.code, exc.message)
    if is_out_of_memory(exc):
        return Verdict("failed", ErrorCode.out_of_memory, short_message(exc))
    return Verdict("failed", ErrorCode.pipeline_error, f"{type(exc).__name__}: {short_message(exc)}")


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Exponential backoff for the retry after ``attempt`` (1-based): base, 2*base, 4*base, ... capped."""
    return float(min(cap_s, base_s * 2 ** max(0, attempt - 1)))

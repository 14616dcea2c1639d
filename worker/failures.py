"""How an exception that ends a job attempt is turned into an outcome (cog: infrastructure errors kept
apart from model errors; fal/Runway: a stable machine-readable code on every failure).

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

from worker.errors import ErrorCode, FatalWorkerError, JobCanceled, JobError, RequestRejected, TransientError

__all__ = ["JobInterrupted", "StaleClaim", "Verdict", "backoff_s", "classify", "is_out_of_memory", "short_message"]

_MAX_MESSAGE = 300


class StaleClaim(Exception):
    """A fenced queue call refused this attempt (re-delivered, released or finished elsewhere)."""


class JobInterrupted(Exception):
    """The worker is stopping (drain grace over, or a second signal): release the job for re-delivery."""


Action = Literal["canceled", "failed", "retry", "abandon", "release", "fatal"]


@dataclass(frozen=True)
class Verdict:
    action: Action
    code: ErrorCode | None = None
    message: str = ""


def short_message(exc: BaseException) -> str:
    """First line of the exception text, bounded: records and logs carry no tracebacks or tensors."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA/host allocator exhaustion as torch reports it (the class moved between torch versions)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"OutOfMemoryError", "MemoryError"}:
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


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

"""Error codes and the exception tree shared by the worker, the queue and the API.

Every failure that reaches a record or an HTTP body carries one stable, machine-readable code from
``ErrorCode`` (a closed enum: adding a code is a contract change, removing one is a breaking change).

Exception tree::

    GenworkerError
    ├── RequestRejected      a create request or queue payload that the catalog refuses (4xx, terminal)
    ├── JobError             a job that fails for good, with a code (no retry)
    │   └── JobCanceled      the job's cancel flag was seen (ends ``canceled``, not ``failed``)
    ├── TransientError       infrastructure trouble worth a retry with backoff (storage, queue, crash)
    └── FatalWorkerError     the worker itself cannot go on (bad config, lost device); it stops
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ErrorCode",
    "FatalWorkerError",
    "GenworkerError",
    "JobCanceled",
    "JobError",
    "RequestRejected",
    "TransientError",
]


class ErrorCode(StrEnum):
    """Every error code the service emits, in records and in HTTP error bodies."""

    # Request validation (HTTP 400 at create; dead-letter reason for a bad queue payload).
    invalid_request = "invalid_request"  # body is not JSON, or not an object of the expected shape
    model_not_found = "model_not_found"
    unsupported_mode = "unsupported_mode"
    unsupported_variant = "unsupported_variant"
    invalid_parameter = "invalid_parameter"  # wrong type, out of range, not an allowed value
    unsupported_parameter = "unsupported_parameter"  # a parameter this model does not support
    invalid_payload = "invalid_payload"  # a queue entry that is not a valid job (dead-lettered)

    # HTTP tier.
    unauthenticated = "unauthenticated"  # 401: missing, invalid or revoked API key
    insufficient_scope = "insufficient_scope"  # 403
    not_found = "not_found"  # 404
    method_not_allowed = "method_not_allowed"  # 405
    idempotency_conflict = "idempotency_conflict"  # 409: same key, different body
    not_cancelable = "not_cancelable"  # 409: generation already terminal
    payload_too_large = "payload_too_large"  # 413
    rate_limited = "rate_limited"  # 429
    service_unavailable = "service_unavailable"  # 503: queue or store unreachable

    # Job outcomes (on failed records).
    out_of_memory = "out_of_memory"
    timeout = "timeout"  # the job ran past the catalog's per-job time limit
    model_load_failed = "model_load_failed"
    pipeline_error = "pipeline_error"  # model code raised
    encode_failed = "encode_failed"  # ffmpeg failed
    upload_failed = "upload_failed"  # the artifact store refused or stayed unreachable
    worker_lost = "worker_lost"  # leases lapsed on every attempt (workers died mid-job)
    internal_error = "internal_error"


class GenworkerError(Exception):
    """Base of every error this project raises on purpose."""


class RequestRejected(GenworkerError):
    """A request (or queue payload) refused before any work: a code, a message and the field path."""

    def __init__(self, code: ErrorCode, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param

    def __repr__(self) -> str:
        return f"RequestRejected({self.code.value!r}, {self.message!r}, param={self.param!r})"


class JobError(GenworkerError):
    """A terminal job failure: the job ends ``failed`` with ``code`` and is not retried."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class JobCanceled(JobError):
    """Raised inside the pipeline's step callback when the job's cancel flag is set."""

    def __init__(self, message: str = "canceled by request") -> None:
        super().__init__(ErrorCode.internal_error, message)


class TransientError(GenworkerError):
    """A failure worth retrying with backoff; after ``max_attempts`` the job fails with ``code``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class FatalWorkerError(GenworkerError):
    """The worker cannot continue (bad configuration, lost device): it releases its job and exits."""

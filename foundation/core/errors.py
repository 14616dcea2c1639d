"""Error codes and the exception tree shared by the worker, the queue and the API.

Every failure that reaches a record or an HTTP body carries one stable, machine-readable code from
``ErrorCode`` (a closed enum: adding a code is a contract change, removing one is a breaking change).

Exception tree. Classes are grouped by what their callers catch: a caller catches a branch, or a class of
it, never the root to mean one of them. Each layer keeps its own classes in its ``errors`` module, under
these branches: ``foundation.queue.errors``, ``foundation.stores.errors``, ``foundation.media.errors``,
``pipelines.errors``, ``worker.errors``, ``api.errors``, ``genworker.errors``; ``tests/unit/test_errors_tree.py``
keeps the shape (a class straight under the root needs a reason written there) and every drawing true.
The branches, with the classes of this module::

    GenworkerError               every error this project raises on purpose
    ├── RequestError             what a caller asked for, refused before any work: told to that caller (a 4xx,
    │   │                        a command's usage error), never retried
    │   ├── RequestRejected      a create request or queue payload the catalog refuses (400, terminal)
    │   └── IdempotencyConflict  an idempotency key reused with another body (409, also ``ValueError``)
    ├── NotFound                 no such thing where the caller looked (a 404, "no such ...")
    │   └── UnknownJob           no record with this id (also ``KeyError``)
    ├── JobError                 a job that fails for good, with a code (no retry)
    │   └── JobCanceled          the job's cancel flag was seen (ends ``canceled``, not ``failed``)
    ├── TransientError           infrastructure trouble worth a retry with backoff (storage, queue, crash)
    │   └── BackendUnavailable   a queue, store or key-store backend did not answer (connection refused
    │                            or reset, timeout, failover, a locked database); the API answers 503
    ├── WorkerError              this worker is at fault, not the job: the job goes back to the queue, unfailed
    │   ├── FatalWorkerError     the worker itself cannot go on (bad config, lost device); it stops
    │   └── WorkerFault          this worker cannot run jobs now, another may: the job is released (no
    │                            attempt used up) and the worker backs off
    ├── ConfigError              settings, a catalog, keys or a command's arguments that cannot be used: the
    │   │                        command says so in one line and exits, a server or worker does not start
    │   └── CatalogError         a catalog file that cannot be used (also a ``ValueError``)
    ├── StoredDataError          something stored earlier (a record, a stream entry, a checkpoint, a compile
    │                            cache) this version will not use: the reader sets it aside and goes on
    └── IllegalTransition        a status change the lifecycle forbids (also a ``ValueError``)

Two more hang straight off the root, drawn in their modules: ``api.errors.ApiError`` (the HTTP answer a route
chose, which only the API's handler catches) and ``pipelines.errors.PromptExtendError`` (caught only inside
prompt extension, which falls back to the original prompt).

Control flow is no error: a ``Signal`` unwinds to the one place that waits for it, and sits outside
``GenworkerError`` so that no ``except GenworkerError`` swallows it. It stays an ``Exception``: the worker's
attempt ends on ``except Exception`` and reads what ended it (``worker.verdict``)::

    Signal                       raised to unwind to a known catcher; never a failure, never in a record

``PUBLIC_MESSAGES`` is the one table of what a client is told for each code: short, fixed sentences. A
failed record stores and serves only these; the details (exception text, ffmpeg's stderr, store
endpoints, paths, adapter classes) go to the worker's log, never to a client.

``short_message`` and ``is_out_of_memory`` read any exception (ours or a library's) the same way
everywhere: in the daemon's outcome table, in prompt extension, in the model cache's OOM retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "PUBLIC_MESSAGES",
    "BackendUnavailable",
    "CatalogError",
    "ConfigError",
    "ErrorCode",
    "FatalWorkerError",
    "GenworkerError",
    "IdempotencyConflict",
    "IllegalTransition",
    "JobCanceled",
    "JobError",
    "NotFound",
    "RequestError",
    "RequestRejected",
    "Signal",
    "StoredDataError",
    "TransientError",
    "UnknownJob",
    "WorkerError",
    "WorkerFault",
    "is_out_of_memory",
    "public_message",
    "short_message",
]

_MAX_MESSAGE = 300


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
    invalid_image = "invalid_image"  # input image: not JPEG/PNG/WebP, truncated or undecodable, bad data URI
    image_too_large = "image_too_large"  # input image over api.inputs.max_image_bytes or max_image_pixels
    image_fetch_failed = "image_fetch_failed"  # input.image_url: unreachable, too slow, not 2xx, a redirect
    image_url_not_allowed = "image_url_not_allowed"  # input.image_url: scheme, host or address refused (SSRF guard)

    # HTTP tier.
    unauthenticated = "unauthenticated"  # 401: missing, invalid or revoked API key
    insufficient_scope = "insufficient_scope"  # 403
    not_found = "not_found"  # 404
    method_not_allowed = "method_not_allowed"  # 405
    idempotency_conflict = "idempotency_conflict"  # 409: same key, different body
    not_cancelable = "not_cancelable"  # 409: generation already terminal
    not_deletable = "not_deletable"  # 409: generation not terminal yet (DELETE /v1/videos/{id})
    payload_too_large = "payload_too_large"  # 413
    rate_limited = "rate_limited"  # 429
    too_many_streams = "too_many_streams"  # 429: the key holds api.events_max_streams_per_key event streams
    queue_full = "queue_full"  # 429: the project has queue.fair max_queued generations waiting for the model
    service_unavailable = "service_unavailable"  # 503: queue or store unreachable
    invalid_webhook_url = "invalid_webhook_url"  # 400: a webhook URL the outbound rules refuse

    # Job outcomes (on failed records).
    out_of_memory = "out_of_memory"
    timeout = "timeout"  # the job ran past the catalog's per-job time limit
    model_load_failed = "model_load_failed"
    pipeline_error = "pipeline_error"  # model code raised
    encode_failed = "encode_failed"  # ffmpeg failed
    upload_failed = "upload_failed"  # the artifact store refused or stayed unreachable
    worker_lost = "worker_lost"  # leases lapsed on every attempt (workers died mid-job)
    input_image_corrupt = "input_image_corrupt"  # the stored input image is gone or fails its sha256
    version_unavailable = "version_unavailable"  # a newer version wrote the job; no worker of it took it in time
    record_unreadable = "record_unreadable"  # the stored record does not parse, in a format this version reads
    # A canceled generation as the Videos API shows it: that API has no canceled status, so it reads
    # ``failed`` with this code (api/video_views.py). Records of canceled jobs carry no error.
    canceled = "canceled"
    internal_error = "internal_error"


# What a client reads in ``error.message`` of a failed generation, by code. Fixed text on purpose: an
# exception's own words may name an S3 endpoint, a server path, an adapter class or carry ffmpeg's
# stderr, and none of that is the client's business (the worker logs it with the job id).
PUBLIC_MESSAGES: Mapping[ErrorCode, str] = MappingProxyType(
    {
        ErrorCode.invalid_request: "the request is malformed",
        ErrorCode.model_not_found: "no such model in the catalog",
        ErrorCode.unsupported_mode: "the model does not support this mode",
        ErrorCode.unsupported_variant: "the model does not offer this variant",
        ErrorCode.invalid_parameter: "a parameter has a value this model does not allow",
        ErrorCode.unsupported_parameter: "a parameter is not supported by this model",
        ErrorCode.invalid_payload: "the job is not a valid request for its model",
        ErrorCode.invalid_image: "the input image is not a valid JPEG, PNG or WEBP image",
        ErrorCode.image_too_large: "the input image has too many bytes or pixels",
        ErrorCode.image_fetch_failed: "the input image could not be fetched from its URL",
        ErrorCode.image_url_not_allowed: "the input image URL is not allowed (https, public addresses only)",
        ErrorCode.unauthenticated: "missing, invalid or revoked API key",
        ErrorCode.insufficient_scope: "the API key lacks the scope this operation needs",
        ErrorCode.not_found: "not found",
        ErrorCode.method_not_allowed: "method not allowed",
        ErrorCode.idempotency_conflict: "the idempotency key was used with a different request body",
        ErrorCode.not_cancelable: "the generation has already ended",
        ErrorCode.not_deletable: "the generation has not ended yet; cancel it first",
        ErrorCode.payload_too_large: "the request body is too large",
        ErrorCode.rate_limited: "rate limit exceeded; retry later",
        ErrorCode.too_many_streams: "this API key has too many open event streams; close one or poll",
        ErrorCode.queue_full: "this project has too many generations waiting for this model; retry later",
        ErrorCode.service_unavailable: "a backend was temporarily unavailable; retry later",
        ErrorCode.invalid_webhook_url: "the webhook URL is not allowed (https, public addresses only)",
        ErrorCode.out_of_memory: "the generation ran out of GPU memory; a smaller size or duration may fit",
        ErrorCode.timeout: "the generation ran past the model's time limit",
        ErrorCode.model_load_failed: "the model could not be loaded; retry later",
        ErrorCode.pipeline_error: "the model failed while generating",
        ErrorCode.encode_failed: "the video could not be encoded",
        ErrorCode.upload_failed: "the video could not be stored; retry later",
        ErrorCode.input_image_corrupt: "the stored input image is missing or does not match its checksum",
        ErrorCode.worker_lost: "the workers running the generation stopped before it finished",
        ErrorCode.version_unavailable: "no worker of the service version that accepted the generation took it; retry",
        ErrorCode.record_unreadable: "the generation's stored record could not be read; it will not run",
        ErrorCode.canceled: "the generation was canceled",
        ErrorCode.internal_error: "internal error",
    }
)
if PUBLIC_MESSAGES.keys() != set(ErrorCode):  # a new code without its sentence is a bug: fail at import
    raise RuntimeError(f"no public message for {sorted(set(ErrorCode) - PUBLIC_MESSAGES.keys())}")


def public_message(code: ErrorCode) -> str:
    """The fixed, client-safe sentence for ``code`` (``PUBLIC_MESSAGES``)."""
    return PUBLIC_MESSAGES[code]


class GenworkerError(Exception):
    """Base of every error this project raises on purpose. Catch a branch below it, not this."""


class Signal(Exception):
    """Base of the control-flow exceptions: each unwinds to the one place that waits for it (a warm-up's end, a
    follower's loop, the attempt's settle, a command's shutdown). Not a ``GenworkerError``, so that no handler
    of errors takes one for a failure; an ``Exception`` still, so the worker's ``except Exception`` around an
    attempt hands it to the verdict as before."""


class RequestError(GenworkerError):
    """What a caller asked for is refused before any work (a 4xx, a command's usage error): the caller is told
    why, and nothing retries it."""


class NotFound(GenworkerError):
    """No such thing (a generation, a webhook endpoint, a delivery) where the caller looked: a 404."""


class WorkerError(GenworkerError):
    """This worker is at fault, not the job: the job goes back to the queue without failing."""


class ConfigError(GenworkerError):
    """Settings, a catalog, keys or a command's arguments that cannot be used: the command says so in one line
    and exits; a server or worker does not start."""


class StoredDataError(GenworkerError):
    """Something stored earlier (a record, a stream entry, a checkpoint, a compile cache) that this version
    will not use: its reader sets it aside (a dead letter, a start from step 0, a fresh compile) and goes on."""


class RequestRejected(RequestError):
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


class BackendUnavailable(TransientError):
    """A backend did not answer or refused for now. Queue and store implementations raise it in place of
    their client library's errors, so callers never import redis, sqlite3 or botocore to decide."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.service_unavailable) -> None:
        super().__init__(code, message)


class FatalWorkerError(WorkerError):
    """The worker cannot continue (bad configuration, lost device): it releases its job and exits."""


class WorkerFault(WorkerError):
    """Something of this worker's own (its encoder, its work disk) stops every job it runs, while another
    worker could run them: the job goes back to the queue without using up an attempt."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code  # what the job would have failed with, for the log line
        self.message = message


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


class UnknownJob(NotFound, KeyError):
    """No record with this id."""


class IdempotencyConflict(RequestError, ValueError):
    """The idempotency key was used before with a different request body."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"idempotency key already used for generation {job_id} with a different body")
        self.job_id = job_id


class IllegalTransition(GenworkerError, ValueError):
    """A status change the lifecycle does not allow (e.g. ``succeeded -> running``)."""

    def __init__(self, current: StrEnum, new: StrEnum) -> None:
        super().__init__(f"illegal status transition {current.value} -> {new.value}")
        self.current = current
        self.new = new


class CatalogError(ConfigError, ValueError):
    """A catalog file that cannot be used; the message names file, entry and field."""

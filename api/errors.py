"""The HTTP tier's exceptions. Route code raises ``ApiError``; the others are raised by the tier's own
parts and turned into answers where they are caught (``api.error_handlers`` renders every one).

Exception tree (the classes of this module, under their branches from ``foundation.core.errors``)::

    GenworkerError
    ├── ApiError                  an HTTP error a route raises (status, code, message, param, headers)
    ├── RequestError
    │   ├── BodyTooLarge          a request body over the limit, found while streaming it (413)
    │   ├── RangeNotSatisfiable   a byte range that selects nothing of an artifact (416, also ``ValueError``)
    │   ├── InvalidProject        a project name the queue's key scheme cannot hold (also ``ValueError``)
    │   ├── OutboundRefused       a URL the outbound rules refuse: its scheme, its host or an address it
    │   │   │                     resolves to (also ``ValueError``)
    │   │   ├── UrlNotAllowed     an input image URL (or any outbound URL) the guard refuses
    │   │   └── UrlRefused        a webhook URL refused (the guard's refusal, translated; too long; too many)
    │   ├── FetchFailed           no usable answer from an input image URL
    │   └── FetchTooLarge         an input image URL's answer over the byte limit
    ├── NotFound
    │   ├── UnknownEndpoint       no webhook endpoint with this id in the project (also ``KeyError``)
    │   └── UnknownDelivery       no webhook delivery with this id in the project (also ``KeyError``)
    └── ConfigError
        ├── SealingError          an endpoint secret this server key cannot open
        └── WebhookKeyMissing     no ``webhooks.secret_key`` where replicas must share one (the queue on Redis)

    Signal
    └── ServerStopped             SIGTERM after uvicorn's graceful shutdown unwinds ``serve``
"""

from __future__ import annotations

from foundation.core.errors import (
    ConfigError,
    ErrorCode,
    GenworkerError,
    NotFound,
    RequestError,
    Signal,
    public_message,
)
from foundation.queue.errors import NewerRecord, UnreadableRecord

__all__ = [
    "ApiError",
    "BodyTooLarge",
    "FetchFailed",
    "FetchTooLarge",
    "InvalidProject",
    "OutboundRefused",
    "RangeNotSatisfiable",
    "SealingError",
    "ServerStopped",
    "UnknownDelivery",
    "UnknownEndpoint",
    "UrlNotAllowed",
    "UrlRefused",
    "WebhookKeyMissing",
    "unreadable_record_error",
]


class ApiError(GenworkerError):
    """Raised by route code; rendered as ``status`` with an ``ErrorBody``."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.headers = headers or {}


class BodyTooLarge(RequestError):
    """A request body over the limit, found while streaming it (answered 413)."""


class RangeNotSatisfiable(RequestError, ValueError):
    """A well-formed byte range that selects nothing of the file (416)."""


class SealingError(ConfigError):
    """A sealed secret that this server key cannot open (the key changed, or the value was altered)."""


class WebhookKeyMissing(ConfigError, ValueError):
    """The queue is on Redis and ``webhooks.secret_key`` is not set: each process would seal endpoint
    secrets with a key of its own that no other replica can open, so the API and the sender refuse to start."""


class UnknownEndpoint(NotFound, KeyError):
    """No webhook endpoint with this id in the caller's project."""


class UnknownDelivery(NotFound, KeyError):
    """No webhook delivery with this id in the caller's project."""


class OutboundRefused(RequestError, ValueError):
    """The outbound rules refuse a URL (its scheme, its host, an address it resolves to) before anything is
    sent: catch this for "refused", ``FetchFailed`` for "tried, and no usable answer"."""


class UrlRefused(OutboundRefused, ValueError):
    """A webhook URL the outbound rules refuse (scheme, host, or an address it resolves to)."""


class UrlNotAllowed(OutboundRefused, ValueError):
    """The outbound rules refuse this URL: its scheme, its host, or an address it resolves to."""


class FetchFailed(RequestError):
    """No usable answer: unreachable, timed out, an error status, or a redirect that is not followed."""


class FetchTooLarge(RequestError):
    """The answer's body is larger than the policy's ``max_bytes``."""


class ServerStopped(Signal):
    """SIGTERM after uvicorn's graceful shutdown: unwinds ``serve`` so callers can clean up."""


class InvalidProject(RequestError, ValueError):
    """A project name the queue's Redis key scheme cannot hold (``foundation.queue.keys``)."""


# ``Retry-After`` of a 503 for a newer version's record: a rolling upgrade replaces the API's pods within
# minutes, and the next poll may reach one of the newer version meanwhile.
NEWER_RECORD_RETRY_AFTER_S = 10


def unreadable_record_error(error: UnreadableRecord, project: str, not_found: ApiError) -> ApiError:
    """The answer to a read of a record this version cannot read (``foundation.queue.records.read``):
    ``not_found`` unless it is ``project``'s (by the project stored beside it, ids must not leak); 503
    ``version_unavailable`` for a newer version's (another replica, or this one upgraded, reads it); 410
    ``record_unreadable`` for one that no version reads: it will not run, and asking again will not help."""
    if error.project != project:
        return not_found
    if isinstance(error, NewerRecord):
        message = "written by a newer version of the service during an upgrade; retry shortly"
        headers = {"Retry-After": str(NEWER_RECORD_RETRY_AFTER_S)}
        return ApiError(503, ErrorCode.version_unavailable, message, None, headers)
    return ApiError(410, ErrorCode.record_unreadable, public_message(ErrorCode.record_unreadable), None)

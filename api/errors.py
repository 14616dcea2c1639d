"""The HTTP tier's exceptions. Route code raises ``ApiError``; the others are raised by the tier's own
parts and turned into answers where they are caught (``api.error_handlers`` renders every one).

Exception tree (the classes of this module, under ``foundation.core.errors.GenworkerError``)::

    GenworkerError
    ├── ApiError              an HTTP error a route raises (status, code, message, param, headers)
    ├── BodyTooLarge          a request body over the limit, found while streaming it (413)
    ├── RangeNotSatisfiable   a byte range that selects nothing of an artifact (416, also ``ValueError``)
    ├── InvalidProject        a project name the queue's key scheme cannot hold (also ``ValueError``)
    ├── UrlNotAllowed         an input image URL the outbound rules refuse (also ``ValueError``)
    ├── FetchFailed           no usable answer from an input image URL
    ├── FetchTooLarge         an input image URL's answer over the byte limit
    ├── UrlRefused            a webhook URL the outbound rules refuse (also ``ValueError``)
    ├── SealingError          an endpoint secret this server key cannot open
    ├── WebhookKeyMissing     no ``webhooks.secret_key`` where replicas must share one (the queue on Redis)
    ├── UnknownEndpoint       no webhook endpoint with this id in the project (also ``KeyError``)
    ├── UnknownDelivery       no webhook delivery with this id in the project (also ``KeyError``)
    └── ServerStopped         SIGTERM after uvicorn's graceful shutdown unwinds ``serve``
"""

from __future__ import annotations

from foundation.core.errors import ErrorCode, GenworkerError

__all__ = [
    "ApiError",
    "BodyTooLarge",
    "FetchFailed",
    "FetchTooLarge",
    "InvalidProject",
    "RangeNotSatisfiable",
    "SealingError",
    "ServerStopped",
    "UnknownDelivery",
    "UnknownEndpoint",
    "UrlNotAllowed",
    "UrlRefused",
    "WebhookKeyMissing",
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


class BodyTooLarge(GenworkerError):
    """A request body over the limit, found while streaming it (answered 413)."""


class RangeNotSatisfiable(GenworkerError, ValueError):
    """A well-formed byte range that selects nothing of the file (416)."""


class SealingError(GenworkerError):
    """A sealed secret that this server key cannot open (the key changed, or the value was altered)."""


class WebhookKeyMissing(GenworkerError, ValueError):
    """The queue is on Redis and ``webhooks.secret_key`` is not set: each process would seal endpoint
    secrets with a key of its own that no other replica can open, so the API and the sender refuse to start."""


class UnknownEndpoint(GenworkerError, KeyError):
    """No webhook endpoint with this id in the caller's project."""


class UnknownDelivery(GenworkerError, KeyError):
    """No webhook delivery with this id in the caller's project."""


class UrlRefused(GenworkerError, ValueError):
    """A webhook URL the outbound rules refuse (scheme, host, or an address it resolves to)."""


class UrlNotAllowed(GenworkerError, ValueError):
    """The outbound rules refuse this URL: its scheme, its host, or an address it resolves to."""


class FetchFailed(GenworkerError):
    """No usable answer: unreachable, timed out, an error status, or a redirect that is not followed."""


class FetchTooLarge(GenworkerError):
    """The answer's body is larger than the policy's ``max_bytes``."""


class ServerStopped(GenworkerError):
    """SIGTERM after uvicorn's graceful shutdown: unwinds ``serve`` so callers can clean up."""


class InvalidProject(GenworkerError, ValueError):
    """A project name the queue's Redis key scheme cannot hold (``foundation.queue.keys``)."""

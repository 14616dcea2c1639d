"""Exceptions raised by the client.

Exception tree::

    ClientError
    ├── ApiError         the service answered with an error status: ``status``, ``code``, ``message``,
    │                    ``param`` (from ``{"error": {...}}``), ``retry_after_s`` when it sent one, and
    │                    ``attempts``: how many times the client sent the request
    ├── TransportFailed  no usable answer after every retry (connection refused or reset, timeouts)
    ├── WaitTimeout      ``wait`` reached its deadline before a terminal status; carries the last record
    └── IntegrityError   a downloaded file's size or sha256 differs from the record's
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genworker_client.models import Generation

__all__ = ["ApiError", "ClientError", "IntegrityError", "TransportFailed", "WaitTimeout"]


class ClientError(Exception):
    """Base of every error the client raises on purpose. ``code`` is stable and machine-readable: the
    service's own code for an ``ApiError``, else the client's (``transport_failed``, ``wait_timeout``,
    ``integrity_error``), never a Python class name."""

    code: str = "client_error"


class ApiError(ClientError):
    """An HTTP error answer. ``code`` is the service's stable machine-readable code.

    When the body is not the service's error shape (a proxy's HTML page, a storage host's XML), ``code``
    is ``http_<status>`` and ``message`` holds the start of the body.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        param: str | None = None,
        *,
        retry_after_s: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (param: {param})" if param else ""))
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s
        self.attempts = attempts

    def __repr__(self) -> str:
        return f"ApiError(status={self.status}, code={self.code!r}, message={self.message!r}, param={self.param!r})"


class TransportFailed(ClientError):
    """Every attempt of one request failed without an HTTP answer; ``__cause__`` is the last httpx error."""

    code = "transport_failed"

    def __init__(self, method: str, url: str, attempts: int) -> None:
        super().__init__(f"{method} {url}: no answer after {attempts} attempt(s)")
        self.method = method
        self.url = url
        self.attempts = attempts


class WaitTimeout(ClientError):
    """``wait`` gave up: the generation was not terminal at the deadline. It may still finish later."""

    code = "wait_timeout"

    def __init__(
        self, generation_id: str, timeout_s: float, last: Generation | None, *, last_status: str | None = None
    ) -> None:
        # The live stream's last status is newer than any record in hand: a wait on the stream has
        # polled nothing since the record it started from.
        self.last_status = last_status or (last.status if last is not None else None)
        seen = self.last_status or "unknown"
        super().__init__(f"generation {generation_id} not terminal after {timeout_s:g} s (last status: {seen})")
        self.generation_id = generation_id
        self.timeout_s = timeout_s
        self.last = last


class IntegrityError(ClientError):
    """A download whose size or sha256 does not match the record; the partial file was removed."""

    code = "integrity_error"

    def __init__(self, url_path: str, what: str, expected: str, actual: str) -> None:
        super().__init__(f"{url_path}: {what} mismatch (expected {expected}, got {actual})")
        self.what = what
        self.expected = expected
        self.actual = actual

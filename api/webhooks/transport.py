"""The seam between the sender and the network: one POST, answered as a ``PostResult``.

``Transport`` is what the sender needs; ``api.webhooks.outbound_transport`` builds the real one on the
project's outbound guard (address checks on resolve and on every hop, no redirects, timeouts, a cap on
the answer's size). A refusal by the guard is a ``PostResult`` with ``refused`` set, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["PostResult", "Transport", "UrlRefused"]

from api.errors import UrlRefused


@dataclass(frozen=True)
class PostResult:
    status_code: int | None  # None: no HTTP answer
    error: str | None = None  # why it failed, for the attempt log (never the body we sent)
    refused: bool = False  # the outbound guard refused the URL or an address it resolved to
    duration_ms: int = 0
    timed_out: bool = False  # no answer within webhooks.timeout_s (what the circuit breaker watches most)

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def result(self) -> str:
        """The attempt's result label (``api.webhooks.metrics.ATTEMPT_RESULTS``)."""
        if self.ok:
            return "delivered"
        if self.refused:
            return "refused"
        if self.timed_out:
            return "timeout"
        return "error" if self.status_code is None else "http_error"


class Transport(Protocol):
    def check_url(self, url: str) -> None:
        """Raise ``UrlRefused`` for a URL no delivery may go to (at registration)."""
        ...

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> PostResult: ...

    def close(self) -> None: ...

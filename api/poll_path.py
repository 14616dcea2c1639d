"""The poll's fast path: ``GET /v1/generations/{generation_id}`` answered in plain ASGI, before the framework.

A client repeats this request every few seconds per generation. Through FastAPI it paid the routing
and six middleware layers, more time than the poll's own work (docs/benchmarks.md, api section).
``PollFastPath`` sits outside that stack and answers this one request itself, with what each layer
would have added, by the same functions the layers use:

- the route's body: ``routes.generations.answer_poll`` (query, key, path, authorize with the poll, view);
- the error bodies: ``errors.error_answer``, the handlers' own table; an unexpected error is answered
  500 and re-raised for the server to log, as Starlette's outermost layer does;
- ``RateLimit-*`` on the answer (``limits``), ``X-Request-Id`` and the access line (``access_log``),
  the request count and latency under the route's template (``metrics``).

Everything else goes to the app unchanged: another method or path, a request that declares a body
(the body limit is the framework's), an app mounted under a ``root_path``. tests/e2e/test_poll_path.py
checks that both paths answer alike, headers, metrics and access line included.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api.access_log import log_request, request_id_for
from api.errors import error_answer
from api.limits import rate_limit_headers, track_decision
from api.metrics import ApiMetrics

__all__ = ["PollFastPath"]

_PREFIX = "/v1/generations/"
_TEMPLATE = _PREFIX + "{generation_id}"
_BODY_HEADERS = frozenset({b"content-length", b"transfer-encoding"})


def _polled_id(scope: Scope) -> str | None:
    """The generation id when ``scope`` is a poll this path answers, else None."""
    if scope["type"] != "http" or scope["method"] != "GET" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    if not path.startswith(_PREFIX):
        return None
    generation_id = path[len(_PREFIX) :]
    if not generation_id or "/" in generation_id:
        return None
    if any(name in _BODY_HEADERS for name, _ in scope["headers"]):
        return None
    return generation_id


class PollFastPath:
    """ASGI: polls go to ``answer`` (a route body), with the stack's additions; the rest to ``app``."""

    def __init__(self, app: ASGIApp, answer: Callable[[Request], Awaitable[Response]], metrics: ApiMetrics) -> None:
        self.app = app
        self.answer = answer
        self.requests = metrics.requests
        self.latency = metrics.latency.labels("GET", _TEMPLATE)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        generation_id = _polled_id(scope)
        if generation_id is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = request_id_for(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        scope["path_params"] = {"generation_id": generation_id}  # as the router sets them
        request = Request(scope, receive)
        unexpected: Exception | None = None
        with track_decision() as decided:
            try:
                response = await self.answer(request)
            except Exception as exc:
                response, reraise = await error_answer(request, exc)
                unexpected = exc if reraise else None
        headers = response.raw_headers
        if unexpected is None:  # answered inside the stack: the layers' headers, innermost first
            headers = [*headers, *rate_limit_headers(decided.decision, headers)]
            headers = [(k, v) for k, v in headers if k != b"x-request-id"]
            headers.append((b"x-request-id", request_id.encode("ascii")))
        # What the layers saw: an unexpected error is answered outside them, as 500 with no body yet.
        status, sent = 500, 0
        try:
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            if unexpected is None:
                status = response.status_code
            await send({"type": "http.response.body", "body": response.body})
            if unexpected is None:
                sent = len(response.body)
        finally:
            elapsed = time.perf_counter() - started
            self.requests.labels("GET", _TEMPLATE, str(status)).inc()
            self.latency.observe(elapsed)
            log_request(scope, request_id, status, sent, elapsed)
        if unexpected is not None:
            raise unexpected

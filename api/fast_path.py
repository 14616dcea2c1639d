"""The hot routes' fast path: the poll, the create and the catalog answered in plain ASGI, before the framework.

A client repeats ``GET /v1/generations/{generation_id}`` every few seconds per generation, and
``POST /v1/generations`` is the other call every client makes; ``GET /v1/models`` needs no key, so
anyone may repeat it. Through FastAPI each pays the routing and six middleware layers, more than the
poll's own work and many times the catalog's (a body from memory). ``FastPath`` sits outside that
stack and answers these requests itself, with what each layer would have added, by the same functions
the layers use. It is optional, off by default (``api.fast_path``): the framework's path is the reference
tests/e2e/test_poll_path.py compares its answers with; what it buys: docs/benchmarks.md,
"Micro-optimizations off by default (issue 48)":

- the route's body: ``routes.generations.answer_poll`` / ``answer_create``, ``routes.models.answer_models``;
- the error bodies: ``errors.error_answer``, the handlers' own table; an unexpected error is answered
  500 and re-raised for the server to log, as Starlette's outermost layer does;
- ``RateLimit-*`` on the answer (``limits``), ``X-Request-Id`` and the access line (``access_log``),
  the request count and latency under the route's template (``metrics``).

Everything else goes to the app unchanged: another method or path, a poll or a catalog call that
declares a body, a catalog call with a query string (the framework's strict query check refuses it), a
create whose body is chunked or declared above ``max_body_bytes`` (the body limit's refusals are the
middleware's), an app mounted under a ``root_path``. A create declaring at most ``max_body_bytes``
cannot stream more (the server holds a request to its ``Content-Length``), so the limit has nothing
to refuse there. tests/e2e/test_poll_path.py checks both paths answer alike, headers, metrics and
access line included.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api.access_log import log_request, request_id_for
from api.error_handlers import error_answer
from api.limits import rate_limit_headers, track_decision
from api.metrics import ApiMetrics

__all__ = ["FastPath"]

Answer = Callable[[Request], Awaitable[Response]]

_CREATE = "/v1/generations"
_POLL_PREFIX = _CREATE + "/"
_POLL = _POLL_PREFIX + "{generation_id}"
_MODELS = "/v1/models"


class FastPath:
    """ASGI: polls go to ``poll`` and creates to ``create`` (route bodies), with the stack's additions;
    the rest to ``app``."""

    def __init__(
        self, app: ASGIApp, *, poll: Answer, create: Answer, models: Answer, metrics: ApiMetrics, max_body_bytes: int
    ) -> None:
        self.app = app
        self.poll = poll
        self.create = create
        self.models = models
        self.max_body_bytes = max_body_bytes
        self.requests = metrics.requests
        self.latency = {
            _POLL: metrics.latency.labels("GET", _POLL),
            _CREATE: metrics.latency.labels("POST", _CREATE),
            _MODELS: metrics.latency.labels("GET", _MODELS),
        }
        self._counted: dict[tuple[str, str, int], Counter] = {}  # the request counter's children, looked up once

    def _route(self, scope: Scope) -> tuple[Answer, str] | None:
        """The route body and template ``scope`` goes to on this path, or None for the app's stack."""
        if scope["type"] != "http" or scope.get("root_path"):
            return None
        method, path = scope["method"], scope["path"]
        if method == "GET" and path == _MODELS:
            if scope.get("query_string") or _declares_body(scope):
                return None
            scope["path_params"] = {}
            return self.models, _MODELS
        if method == "GET" and path.startswith(_POLL_PREFIX):
            generation_id = path[len(_POLL_PREFIX) :]
            if not generation_id or "/" in generation_id:
                return None
            if _declares_body(scope):
                return None
            scope["path_params"] = {"generation_id": generation_id}  # as the router sets them
            return self.poll, _POLL
        if method == "POST" and path == _CREATE:
            declared = None
            for name, value in scope["headers"]:
                if name == b"transfer-encoding":
                    return None
                if name == b"content-length":
                    declared = value
            if declared is None or not declared.isdigit() or int(declared) > self.max_body_bytes:
                return None
            scope["path_params"] = {}
            return self.create, _CREATE
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._route(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        answer, template = route
        started = time.perf_counter()
        request_id = request_id_for(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        request = Request(scope, receive)
        unexpected: Exception | None = None
        with track_decision() as decided:
            try:
                response = await answer(request)
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
            self._count(scope["method"], template, status)
            self.latency[template].observe(elapsed)
            log_request(scope, request_id, status, sent, elapsed)
        if unexpected is not None:
            raise unexpected

    def _count(self, method: str, template: str, status: int) -> None:
        counted = self._counted.get((method, template, status))
        if counted is None:
            counted = self._counted[(method, template, status)] = self.requests.labels(method, template, str(status))
        counted.inc()


def _declares_body(scope: Scope) -> bool:
    return any(name in (b"content-length", b"transfer-encoding") for name, _ in scope["headers"])

"""One JSON access line per request, and a request id that follows it (``X-Request-Id``).

The id is the client's own ``X-Request-Id`` when it is sane (1-128 characters of letters, digits and
``-_.:``), otherwise a new random one; either way it is returned in the response's ``X-Request-Id``
and put in ``scope["state"]["request_id"]`` for handlers. The line goes to the ``genworker.api.access``
logger in the worker's format (``foundation.core.logs``) with ``request_id``, ``method``, ``path``,
``status``, ``bytes``, ``elapsed_ms`` and ``client``. The path is logged without its query string: a
signed artifact URL carries its signature there. Probe and scrape paths (``/healthz``, ``/readyz``,
``/metrics``) are logged at DEBUG so a kubelet polling every few seconds does not drown the log.

Pure ASGI, so response bodies stream through untouched.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["REQUEST_ID_HEADER", "AccessLogMiddleware", "log_request", "request_id_for"]

REQUEST_ID_HEADER = "X-Request-Id"
_SANE_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

log = logging.getLogger("genworker.api.access")


def request_id_for(scope: Scope) -> str:
    """The caller's request id when it is sane, else a fresh one (32 hex characters)."""
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for name, value in headers:
        if name == b"x-request-id":
            if _SANE_ID.fullmatch(value):
                return value.decode("ascii")
            break
    return uuid.uuid4().hex


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_for(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500  # what the client gets when the app raises before it answers
        sent_bytes = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status, sent_bytes
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", request_id.encode("ascii"))]}
            elif message["type"] == "http.response.body":
                sent_bytes += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            log_request(scope, request_id, status, sent_bytes, time.perf_counter() - started)


def log_request(scope: Scope, request_id: str, status: int, sent_bytes: int, elapsed_s: float) -> None:
    """The access line of one request (the middleware's, and the fast path's: api/fast_path.py)."""
    path = scope["path"]  # never the query string
    level = logging.DEBUG if path in _QUIET_PATHS and status < 500 else logging.INFO
    if not log.isEnabledFor(level):
        return
    client = scope.get("client")
    log.log(
        level,
        "%s %s %d",
        scope["method"],
        path,
        status,
        extra={
            "request_id": request_id,
            "method": scope["method"],
            "path": path,
            "status": status,
            "bytes": sent_bytes,
            "elapsed_ms": round(elapsed_s * 1000, 1),
            "client": f"{client[0]}:{client[1]}" if client else None,
        },
    )

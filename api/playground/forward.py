"""``/playground/api/...``: the page's same-origin API, acting for one project with a server-held key.

Each call passes the ``RequestGuard`` (host, fetch metadata, origin, session, CSRF token), then is
forwarded in process to the public route it names, with ``Authorization: Bearer <playground key>``
added and the browser's cookie and token left out. The public route does all the work (validation,
idempotency, price hold, rate limit, signed URLs, streaming), so the page sees exactly what an API
client sees and the key never leaves the server. Only the routes in ``_ROUTES`` are reachable: this is
no general proxy. One route is the playground's own: ``POST quote``, the price hold a create would
take, computed by the same ``resolve`` as create.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import ApiError
from api.playground.guard import RequestGuard
from foundation.core.catalog import Catalog
from foundation.core.errors import ErrorCode
from foundation.core.intake import read_create_request
from foundation.core.resolve import resolve

__all__ = ["API_PATH", "PlaygroundApi"]

API_PATH = "/playground/api"
_ID = r"[A-Za-z0-9_-]{1,128}"
# (method, playground path below API_PATH, public path template): the whole reachable surface.
_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("GET", re.compile(r"/models"), "/v1/models"),
    ("GET", re.compile(r"/generations"), "/v1/generations"),
    ("POST", re.compile(r"/generations"), "/v1/generations"),
    ("GET", re.compile(rf"/generations/(?P<id>{_ID})"), "/v1/generations/{id}"),
    ("POST", re.compile(rf"/generations/(?P<id>{_ID})/cancel"), "/v1/generations/{id}/cancel"),
    ("GET", re.compile(rf"/generations/(?P<id>{_ID})/events"), "/v1/generations/{id}/events"),
)
# Request headers the public route may see; the cookie, the CSRF token and any Authorization are dropped.
_FORWARDED = frozenset(
    {b"accept", b"content-type", b"content-length", b"idempotency-key", b"host", b"user-agent", b"last-event-id"}
)
_QUOTE_PROMPT = "price quote"  # resolve wants a prompt; the price does not depend on it


def _target(method: str, path: str) -> str:
    """The public path for a playground call; 404 / 405 ``ApiError`` when there is none."""
    path_matched = False
    for allowed, pattern, template in _ROUTES:
        match = pattern.fullmatch(path)
        if match is None:
            continue
        path_matched = True
        if allowed == method:
            return template.format(**match.groupdict())
    if path_matched:
        raise ApiError(405, ErrorCode.method_not_allowed, f"{method} is not allowed on this playground route")
    raise ApiError(404, ErrorCode.not_found, "no such playground route")


class PlaygroundApi:
    """The ASGI app mounted at ``API_PATH``; ``target`` is the whole API app the calls are forwarded to."""

    def __init__(self, target: Callable[[], ASGIApp], guard: RequestGuard, api_key: str, catalog: Catalog) -> None:
        self._target = target
        self._guard = guard
        self._authorization = f"Bearer {api_key}".encode("ascii")
        self._catalog = catalog

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise ApiError(404, ErrorCode.not_found, "no such playground route")
        request = Request(scope, receive)
        method = scope["method"]
        self._guard.check_api_call(method, request.headers, request.cookies)
        path = scope["path"].removeprefix(API_PATH)
        if path == "/quote":
            if method != "POST":
                raise ApiError(405, ErrorCode.method_not_allowed, f"{method} is not allowed on this playground route")
            await self._quote(await request.body())(scope, receive, send)
            return
        await self._target()(self._inner_scope(scope, method, _target(method, path)), receive, send)

    def _inner_scope(self, scope: Scope, method: str, path: str) -> Scope:
        """A fresh request scope for the public route (nothing of the outer routing carried over)."""
        headers = [(k, v) for k, v in Headers(scope=scope).raw if k in _FORWARDED]
        headers.append((b"authorization", self._authorization))
        request_id = scope.get("state", {}).get("request_id")
        if isinstance(request_id, str):  # the access log lines of both requests share one id
            headers.append((b"x-request-id", request_id.encode("ascii")))
        return {
            "type": "http",
            "asgi": scope.get("asgi", {"version": "3.0"}),
            "http_version": scope.get("http_version", "1.1"),
            "method": method,
            "scheme": scope.get("scheme", "http"),
            "server": scope.get("server"),
            "client": scope.get("client"),
            "root_path": "",
            "path": path,
            "raw_path": path.encode("ascii"),
            "query_string": scope.get("query_string", b""),
            "headers": headers,
            "extensions": scope.get("extensions", {}),
        }

    def _quote(self, body: bytes) -> JSONResponse:
        """The hold a create with these model, mode, variant and parameters would take (same errors)."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise ApiError(400, ErrorCode.invalid_request, "request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise ApiError(400, ErrorCode.invalid_request, "request body must be a JSON object")
        fields = {name: data[name] for name in ("model", "mode", "variant", "parameters") if name in data}
        request = read_create_request({**fields, "input": {"prompt": _QUOTE_PROMPT}}, self._catalog)
        _, hold = resolve(request, self._catalog)
        return JSONResponse({"price_hold": hold.model_dump(mode="json")})

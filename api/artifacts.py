"""An ASGI app that serves a ``LocalStore``'s files to holders of a valid signed URL.

The API mounts it where signed URLs point::

    from api.artifacts import artifact_app
    from foundation.stores.local import ARTIFACTS_PATH  # "/v1/artifacts"
    app.mount(ARTIFACTS_PATH, artifact_app(store))   # store: LocalStore

``GET``/``HEAD /v1/artifacts/<key>?expires=<unix>&sig=<hex>``:

- ``200`` the file, streamed in chunks by Starlette's ``FileResponse``, with ``Content-Type``,
  ``Content-Length``, ``Accept-Ranges: bytes``, ``ETag`` and ``Last-Modified``;
- ``206`` for one byte range (``Range: bytes=a-b``, ``a-``, ``-n``) with ``Content-Range`` (video players
  seek this way); several ranges or a malformed header (non-ASCII digits included) get the whole
  file, as RFC 9110 has a server ignore a Range it cannot parse;
- ``416`` (``Content-Range: bytes */<size>``) for a well-formed range that selects nothing (it starts
  past the end, or asks for the last 0 bytes);
- ``403`` ``invalid_request`` (``param: "sig"``) for a missing, tampered or expired signature, checked
  before anything touches the disk, so an unsigned request learns nothing about which keys exist (not
  ``unauthenticated``: that is the 401 of a missing or bad API key, and no key helps here); ``404`` for
  a missing file, ``405`` else.

Error bodies have the project's shape ``{"error": {"code", "message", "param"}}``.
"""

from __future__ import annotations

import json
import mimetypes
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from starlette.responses import FileResponse

from api.errors import RangeNotSatisfiable
from foundation.core.errors import ErrorCode, TransientError
from foundation.stores.errors import InvalidKey
from foundation.stores.local import LocalStore

__all__ = ["ByteRange", "RangeNotSatisfiable", "artifact_app", "parse_range"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True)
class ByteRange:
    start: int
    end: int  # inclusive, as in Content-Range

    @property
    def length(self) -> int:
        return self.end - self.start + 1


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The single byte range ``header`` asks of a ``size``-byte file; None means "send it all".

    RFC 9110 (14.2): a Range the server cannot parse is ignored (200 with the whole file); a
    well-formed one that selects nothing raises ``RangeNotSatisfiable`` (416).
    """
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_text, dash, last_text = spec.strip().partition("-")
    first, last = _position(first_text), _position(last_text)
    if not dash or (first is None and first_text) or (last is None and last_text):
        return None  # not digits: '²', '٣', '0x10', ' 5', '+5' are no byte positions
    if first is None:
        if last is None:
            return None
        if last == 0 or size == 0:  # the last n bytes
            raise RangeNotSatisfiable(header)
        return ByteRange(max(0, size - last), size - 1)
    if last is not None and last < first:
        return None  # syntactically invalid: ignore it
    if first >= size:
        raise RangeNotSatisfiable(header)
    end = size - 1 if last is None else min(last, size - 1)
    return ByteRange(first, end)


# Longer digit strings than this exceed any file size; capping them keeps ``int`` away from
# Python's limit on converting very long digit strings (a ValueError, which would be a 500).
_MAX_DIGITS = 18


def _position(text: str) -> int | None:
    """A byte position as RFC 9110 spells it (ASCII digits only), or None. ``str.isdigit`` alone
    would accept '²' or '٣', which ``int`` then refuses or reads as another number."""
    if not text or not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0") or "0"
    return int(significant) if len(significant) <= _MAX_DIGITS else 10**_MAX_DIGITS


def artifact_app(store: LocalStore, *, chunk_bytes: int = _CHUNK_BYTES) -> ASGIApp:
    """The ASGI app serving ``store``; mount it at ``foundation.stores.local.ARTIFACTS_PATH``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # only when run on its own rather than mounted
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        await _serve(store, scope, receive, send, chunk_bytes)

    return app


async def _serve(store: LocalStore, scope: Scope, receive: Receive, send: Send, chunk_bytes: int) -> None:
    method = scope["method"]
    if method not in ("GET", "HEAD"):
        await _error(send, 405, ErrorCode.method_not_allowed, "use GET or HEAD", extra=[(b"allow", b"GET, HEAD")])
        return
    key = _route_key(scope)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    expires, sig = query.get("expires", [""]), query.get("sig", [""])
    if len(expires) != 1 or len(sig) != 1 or not store.verify(key, expires[0], sig[0]):
        # Not `unauthenticated`: that code is about API keys (401), and no key would help here.
        message = "the download URL is invalid or expired; fetch the generation again for a fresh one"
        await _error(send, 403, ErrorCode.invalid_request, message, param="sig")
        return
    try:
        path = store.path_for(key)
        stat_result = os.stat(path) if path.is_file() else None
    except (InvalidKey, TransientError, OSError):  # the store's path_for, then our own stat
        stat_result = None
    if stat_result is None:
        await _error(send, 404, ErrorCode.not_found, "no such artifact")
        return
    size = stat_result.st_size
    try:
        byte_range = parse_range(_headers(scope).get(b"range", b"").decode("latin-1"), size)
    except RangeNotSatisfiable:
        extra = [(b"content-range", f"bytes */{size}".encode())]
        await _error(send, 416, ErrorCode.invalid_request, "range not satisfiable", param="Range", extra=extra)
        return
    remaining_s = max(0, int(expires[0]) - int(time.time()))
    response = FileResponse(
        path,
        stat_result=stat_result,
        media_type=mimetypes.guess_type(key)[0] or "application/octet-stream",
        headers={"cache-control": f"private, max-age={remaining_s}"},
    )
    response.chunk_size = chunk_bytes
    # Starlette serves the bytes (206, Content-Range, If-Range, HEAD) of the one range we accepted,
    # spelt canonically; the RFC 9110 decisions (ignore what cannot be parsed, 416 in our error
    # shape) stay ours, so Starlette never sees a header it would answer with 400 or a multipart body.
    raw = [(n, v) for n, v in scope.get("headers", []) if n.lower() != b"range"]
    if byte_range is not None:
        raw.append((b"range", f"bytes={byte_range.start}-{byte_range.end}".encode()))
    await response({**scope, "headers": raw}, receive, send)


def _route_key(scope: Scope) -> str:
    """The key: the path below the mount point (Starlette keeps the full path, sets root_path)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path.lstrip("/")


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope.get("headers", [])}


async def _error(
    send: Send,
    status: int,
    code: ErrorCode,
    message: str,
    *,
    param: str | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps({"error": {"code": code.value, "message": message, "param": param}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return

"""An ASGI app that serves a ``LocalStore``'s files to holders of a valid signed URL.

The API mounts it where signed URLs point::

    from api.artifacts import artifact_app
    from worker.stores.local import ARTIFACTS_PATH  # "/v1/artifacts"
    app.mount(ARTIFACTS_PATH, artifact_app(store))   # store: LocalStore

``GET``/``HEAD /v1/artifacts/<key>?expires=<unix>&sig=<hex>``:

- ``200`` the file, streamed in chunks, with ``Content-Type``, ``Content-Length``, ``Accept-Ranges: bytes``;
- ``206`` for one byte range (``Range: bytes=a-b``, ``a-``, ``-n``) with ``Content-Range`` (video players
  seek this way); several ranges or a malformed header get the whole file (allowed by RFC 9110);
- ``416`` (``Content-Range: bytes */<size>``) for a range that starts past the end;
- ``403`` for a missing, tampered or expired signature (checked before anything touches the disk, so
  an unsigned request learns nothing about which keys exist), ``404`` for a missing file, ``405`` else.

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

import anyio

from worker.core.errors import ErrorCode, GenworkerError, TransientError
from worker.stores.local import InvalidKey, LocalStore

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


class RangeNotSatisfiable(GenworkerError, ValueError):
    """A well-formed byte range that selects nothing of the file (416)."""


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The single byte range ``header`` asks of a ``size``-byte file; None means "send it all"."""
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first.isdigit() or first == "") or not (last.isdigit() or last == ""):
        return None
    if first == "":
        if last == "":
            return None
        suffix = int(last)  # the last n bytes
        if suffix == 0 or size == 0:
            raise RangeNotSatisfiable(header)
        return ByteRange(max(0, size - suffix), size - 1)
    start = int(first)
    if last != "" and int(last) < start:
        return None  # syntactically invalid: ignore it
    if start >= size:
        raise RangeNotSatisfiable(header)
    end = size - 1 if last == "" else min(int(last), size - 1)
    return ByteRange(start, end)


def artifact_app(store: LocalStore, *, chunk_bytes: int = _CHUNK_BYTES) -> ASGIApp:
    """The ASGI app serving ``store``; mount it at ``worker.stores.local.ARTIFACTS_PATH``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # only when run on its own rather than mounted
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        await _serve(store, scope, send, chunk_bytes)

    return app


async def _serve(store: LocalStore, scope: Scope, send: Send, chunk_bytes: int) -> None:
    method = scope["method"]
    if method not in ("GET", "HEAD"):
        await _error(send, 405, ErrorCode.method_not_allowed, "use GET or HEAD", extra=[(b"allow", b"GET, HEAD")])
        return
    key = _route_key(scope)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    expires, sig = query.get("expires", [""]), query.get("sig", [""])
    if len(expires) != 1 or len(sig) != 1 or not store.verify(key, expires[0], sig[0]):
        message = "the download URL is invalid or expired; fetch the generation again for a fresh one"
        await _error(send, 403, ErrorCode.unauthenticated, message, param="sig")
        return
    try:
        path = store.path_for(key)
        size = os.stat(path).st_size if path.is_file() else None
    except (InvalidKey, TransientError, OSError):  # the store's path_for, then our own stat
        size = None
    if size is None:
        await _error(send, 404, ErrorCode.not_found, "no such artifact")
        return
    headers = _headers(scope)
    try:
        byte_range = parse_range(headers.get(b"range", b"").decode("latin-1"), size)
    except RangeNotSatisfiable:
        extra = [(b"content-range", f"bytes */{size}".encode())]
        await _error(send, 416, ErrorCode.invalid_request, "range not satisfiable", param="Range", extra=extra)
        return
    content_type = mimetypes.guess_type(key)[0] or "application/octet-stream"
    remaining_s = max(0, int(expires[0]) - int(time.time()))
    out = [
        (b"content-type", content_type.encode()),
        (b"accept-ranges", b"bytes"),
        (b"cache-control", f"private, max-age={remaining_s}".encode()),
    ]
    start, length, status = 0, size, 200
    if byte_range is not None:
        start, length, status = byte_range.start, byte_range.length, 206
        out.append((b"content-range", f"bytes {byte_range.start}-{byte_range.end}/{size}".encode()))
    out.append((b"content-length", str(length).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    if method == "HEAD":
        await send({"type": "http.response.body", "body": b""})
        return
    await _stream(path, start, length, send, chunk_bytes)


async def _stream(path: os.PathLike[str], start: int, length: int, send: Send, chunk_bytes: int) -> None:
    remaining = length
    async with await anyio.open_file(path, "rb") as f:
        await f.seek(start)
        while remaining > 0:
            block = await f.read(min(chunk_bytes, remaining))
            if not block:  # the file shrank under us; end the body rather than hang
                break
            remaining -= len(block)
            await send({"type": "http.response.body", "body": block, "more_body": remaining > 0})
    if remaining > 0:
        await send({"type": "http.response.body", "body": b""})


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

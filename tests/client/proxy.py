"""A loopback TCP proxy that loses one answer: the request reaches the server, the server answers in
full, and the proxy then closes the client's connection without sending a byte of it.

That is the failure the spec's Idempotency-Key rule exists for (the server did the work, the client
never heard), reproduced with real sockets instead of a patched transport.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["DroppingProxy", "ProxiedRequest"]


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str
    headers: dict[str, str]
    dropped: bool


def _read_head(conn: socket.socket) -> tuple[bytes, bytes] | None:
    """(head, body bytes already read) or None when the client closed before sending a request."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head, rest


def _recv_until_eof(sock: socket.socket) -> bytes:
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    return b"".join(parts)


@dataclass
class DroppingProxy:
    """Forwards HTTP/1.1 requests to ``127.0.0.1:upstream_port``, one upstream connection per request
    (``Connection: close`` both ways, so the answer's end is simply EOF). The first request for which
    ``drop(method, path)`` is true has its answer swallowed."""

    upstream_port: int
    drop: Callable[[str, str], bool]
    requests: list[ProxiedRequest] = field(default_factory=list)
    _dropped_one: bool = False

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        # accept() is not woken by close() from another thread; a short timeout lets it see _stop.
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="dropping-proxy", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(30)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            read = _read_head(conn)
            if read is None:
                return
            head, body = read
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _version = request_line.split(" ", 2)
            headers = dict(line.split(": ", 1) for line in header_lines)
            lowered = {k.lower(): v for k, v in headers.items()}
            length = int(lowered.get("content-length", "0"))
            while len(body) < length:
                body += conn.recv(65536)
            kept = [line for line in header_lines if not line.lower().startswith("connection:")]
            upstream_head = "\r\n".join([request_line, *kept, "Connection: close"]).encode("latin-1")
            with socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
                upstream.sendall(upstream_head + b"\r\n\r\n" + body)
                answer = _recv_until_eof(upstream)
            with self._lock:
                dropped = not self._dropped_one and self.drop(method, path)
                self._dropped_one = self._dropped_one or dropped
                self.requests.append(ProxiedRequest(method, path, lowered, dropped))
            if not dropped:
                conn.sendall(answer)

"""A receiver's answer is read raw and capped on the wire: the POST asks for no encoding, a gzip bomb stays
compressed bytes nobody inflates, and an endless answer is cut at ``webhooks.max_response_bytes``."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psutil
import pytest

from api.webhooks.outbound_transport import GuardedTransport
from foundation.settings import WebhookSettings

DRIP_S = 1.5  # under the read timeout a request is sent with: no single read ever times out
BOMB = gzip.compress(b"\0" * 200_000_000, compresslevel=9)  # about 200 KB that inflate to 200 MB


class Answers:
    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.sent: list[int] = []
        answers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                answers.seen.append({k.lower(): v for k, v in self.headers.items()})
                if self.path.startswith("/drip"):
                    self._drip(head=self.path == "/drip-head")
                    return
                self.send_response(200)
                if self.path == "/bomb":
                    self.send_header("content-encoding", "gzip")
                    self.send_header("content-length", str(len(BOMB)))
                    self.end_headers()
                    self._write(BOMB)
                else:  # endless: chunks of 64 KiB until the client goes away
                    self.end_headers()
                    self._write(None)

            def _write(self, body: bytes | None) -> None:
                sent = 0
                try:
                    if body is not None:
                        self.wfile.write(body)
                        sent = len(body)
                    else:
                        while sent < 1_000_000_000:
                            self.wfile.write(b"x" * 65_536)
                            sent += 65_536
                except OSError:
                    pass
                answers.sent.append(sent)

            def _drip(self, *, head: bool) -> None:
                """One byte every DRIP_S: of the status line and headers (``head``), or of the body after them."""
                whole = b"HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\n" + b"x" * 40
                start = 0 if head else whole.index(b"\r\n\r\n") + 4
                try:
                    self.wfile.write(whole[:start])
                    self.wfile.flush()
                    for i in range(start, len(whole)):
                        time.sleep(DRIP_S)
                        self.wfile.write(whole[i : i + 1])
                        self.wfile.flush()
                except OSError:  # the client gave up: what the test wants
                    pass
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"


@pytest.fixture
def answers() -> Iterator[Answers]:
    a = Answers()
    yield a
    a.server.shutdown()
    a.server.server_close()


def test_a_gzip_answer_is_never_inflated(answers: Answers) -> None:
    transport = GuardedTransport(WebhookSettings(allowed_hosts=["127.0.0.1:*"], max_response_bytes=1_000_000))
    process = psutil.Process()
    try:
        before = process.memory_info().rss
        result = transport.post(answers.url("/bomb"), b"{}", {"webhook-id": "msg_1"})
        grown = process.memory_info().rss - before
    finally:
        transport.close()
    assert result.ok, result.error
    assert answers.seen[0]["accept-encoding"] == "identity"  # nothing asked for that would need inflating
    assert grown < 50_000_000, f"the answer was inflated: RSS grew {grown / 1e6:.0f} MB"


def test_an_endless_answer_is_cut_at_the_cap(answers: Answers) -> None:
    transport = GuardedTransport(WebhookSettings(allowed_hosts=["127.0.0.1:*"], max_response_bytes=100_000))
    try:
        started = time.monotonic()
        result = transport.post(answers.url("/endless"), b"{}", {"webhook-id": "msg_1"})
        took = time.monotonic() - started
    finally:
        transport.close()
    assert result.ok and took < 5, (result, took)
    deadline = time.monotonic() + 10
    while not answers.sent:  # the receiver notices the closed connection
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # What the receiver got out before the client closed: the cap, plus what the sockets' buffers held.
    assert answers.sent[0] < 100_000_000


@pytest.mark.parametrize(("path", "delivered"), [("/drip-head", False), ("/drip-body", True)])
def test_a_trickling_receiver_ends_the_attempt_at_its_deadline(answers: Answers, path: str, delivered: bool) -> None:
    """One byte every 1.5 s keeps every single read inside its time limit: only a watch on the whole attempt ends
    it at ``timeout_s`` (+10 %). A status that arrived in time is the receiver's answer (its body is not needed)."""
    transport = GuardedTransport(WebhookSettings(allowed_hosts=["127.0.0.1:*"], timeout_s=2.0))
    try:
        started = time.monotonic()
        result = transport.post(answers.url(path), b"{}", {"webhook-id": "msg_1"})
        took = time.monotonic() - started
    finally:
        transport.close()
    assert took <= 2.2, (result, took)
    assert result.ok is delivered, result
    if not delivered:
        assert result.timed_out and result.status_code is None, result

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

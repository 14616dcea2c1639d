"""Webhook test parts: a real HTTP receiver on loopback, real queues (SQLite, redis-server) driven
through their worker calls, and settings with short backoffs."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import Catalog, load_catalog
from foundation.core.contract import Artifact, ErrorInfo, GenerationRecord, Status, Usage
from foundation.core.errors import ErrorCode
from foundation.queue.base import JobQueue, Outcome
from foundation.settings import Settings
from tests.integration.worker_harness import make_record

HANG = -1  # a script entry: answer 500 only after 3 s

FAST_HOOKS: dict[str, Any] = {
    "allowed_hosts": ["127.0.0.1:*"],
    "backoff_base_s": 0.2,
    "backoff_cap_s": 0.4,
    "poll_interval_s": 0.05,
    "max_age_s": 60.0,
    "lease_s": 5.0,
    "timeout_s": 5.0,
}


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)  # arrival, wall clock (events carry wall-clock timestamps)

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def payload(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


@dataclass
class Receiver:
    """Records every request; answers each with the next status of ``script`` (then ``default``)."""

    server: ThreadingHTTPServer
    script: list[int] = field(default_factory=list)
    default: int = 200
    redirect_to: str | None = None
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def answer(self, request: Received) -> int:
        with self.lock:
            self.received.append(request)
            return self.script.pop(0) if self.script else self.default

    def accepted(self) -> dict[str, Received]:
        """The logical deliveries (by webhook-id) whose last attempt was answered 2xx."""
        with self.lock:
            return {r.webhook_id: r for r in self.received}


def start_receiver() -> Receiver:
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            receiver = holder[0]
            status = receiver.answer(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            if status == HANG:  # hold the request open (a sender may be killed meanwhile), then fail it
                time.sleep(3)
                status = 500
            try:
                self.send_response(status)
                if status in (301, 302, 307, 308) and receiver.redirect_to:
                    self.send_header("location", receiver.redirect_to)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:  # the sender is gone
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(server))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return holder[0]


class DeadReceivers:
    """Listening sockets that accept every connection and never answer (nor read, nor close)."""

    def __init__(self, count: int) -> None:
        self.listeners = [socket.create_server(("127.0.0.1", 0), backlog=128) for _ in range(count)]
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        for listener in self.listeners:
            listener.settimeout(0.1)
            threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.held.append(conn)

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{s.getsockname()[1]}/hook" for s in self.listeners]

    def accepted(self) -> int:
        with self._lock:
            return len(self.held)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for conn in self.held:  # the sender's attempts end now instead of at their time limit
                conn.close()
        for listener in self.listeners:
            listener.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = start_receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


# On Redis every process must share one server key (the API refuses to start without it).
SERVER_KEY = "B8cWnWZ6Tj6EDUyYM5u1gG5sVJ0wS9TaKXk1Q6mY2xA="


def hook_settings(data_dir: Path, *, redis_url: str | None = None, **hooks: Any) -> Settings:
    if redis_url:
        hooks = {"secret_key": SERVER_KEY, **hooks}
    return Settings(
        data_dir=str(data_dir),
        queue={
            "backend": "redis" if redis_url else "sqlite",
            "sqlite_path": str(data_dir / "queue.db"),
            "redis_url": redis_url or "redis://127.0.0.1:1/0",
        },
        webhooks={**FAST_HOOKS, **hooks},
    )


def run_job(queue: JobQueue, catalog: Catalog, project: str, status: Status = Status.succeeded) -> GenerationRecord:
    """Enqueue a job and take it through claim → finish on the real queue (its real events)."""
    record = make_record(catalog, "tiny-wan", resolution="144p", duration_seconds=1)
    record = record.model_copy(update={"project": project})
    queue.enqueue(record)
    return finish_job(queue, record.id, status)


def finish_job(queue: JobQueue, job_id: str, status: Status = Status.succeeded) -> GenerationRecord:
    """Take the queued job through claim → finish on the real queue, as a worker would (its real events)."""
    claim = queue.claim(f"w-{uuid.uuid4().hex[:6]}", ["tiny-wan"])
    assert claim is not None and claim.job_id == job_id
    outcome = Outcome(status=status)
    if status is Status.succeeded:
        artifact = Artifact(
            kind="video",
            key=f"generations/{job_id}/1/video.mp4",
            content_type="video/mp4",
            bytes=1234,
            sha256="0" * 64,
            width=256,
            height=144,
            fps=16.0,
            frames=16,
            duration_seconds=1.0,
        )
        outcome = Outcome(status=status, artifacts=[artifact], usage=Usage(output_seconds=1.0, gpu_seconds=0.5))
    elif status is Status.failed:
        outcome = Outcome(status=status, error=ErrorInfo(code=ErrorCode.pipeline_error, message="boom"))
    assert queue.finish(claim, outcome)
    stored = queue.get(job_id)
    assert stored is not None
    return stored

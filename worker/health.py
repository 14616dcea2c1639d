"""Liveness, readiness and metrics over HTTP: ``/healthz``, ``/readyz``, ``/metrics``.

- ``/healthz`` answers 200 while the process can make progress and 503 once it cannot (a job stuck
  inside one pipeline step past its time limit, a lost device): the orchestrator should restart it.
- ``/readyz`` answers 200 only after setup (catalog, queue, store, preloaded models), until a drain
  starts, and while at least one hosted model is free of a fault of this worker's own
  (``worker.faults``); its body lists those faults (kind, model, reason, failures, retry_in_s)
  and the hosted models still taken. A worker that is not ready claims nothing.

One small ``ThreadingHTTPServer`` thread, bound to loopback by default.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from worker.metrics import WorkerMetrics

if TYPE_CHECKING:
    from worker.faults import LocalFaults

__all__ = ["HealthState", "StatusServer"]

log = logging.getLogger("genworker.health")


class HealthState:
    """Thread-safe flags: ``ready`` (taking jobs) and ``healthy`` (no restart needed), with reasons."""

    def __init__(self, metrics: WorkerMetrics, faults: LocalFaults | None = None) -> None:
        self._lock = threading.Lock()
        self._metrics = metrics
        self._faults = faults
        self._ready = False
        self._ready_reason = "starting"
        self._healthy = True
        self._unhealthy_reason: str | None = None
        metrics.healthy.set(1)

    def set_ready(self, ready: bool, reason: str) -> None:
        with self._lock:
            self._ready, self._ready_reason = ready, reason
            self._metrics.set_ready(ready)

    def mark_unhealthy(self, reason: str) -> None:
        with self._lock:
            if self._healthy:
                log.error("worker unhealthy: %s", reason, extra={"reason": reason})
            self._healthy, self._unhealthy_reason = False, reason
            self._ready, self._ready_reason = False, "unhealthy"
            self._metrics.healthy.set(0)
            self._metrics.set_ready(False)

    @property
    def ready(self) -> bool:
        with self._lock:
            ready = self._ready and self._healthy
        return ready and self._models_left()

    def _models_left(self) -> bool:
        return self._faults is None or bool(self._faults.ready_models())

    @property
    def healthy(self) -> bool:
        with self._lock:
            return self._healthy

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            snap: dict[str, Any] = {
                "healthy": self._healthy,
                "ready": self._ready and self._healthy,
                "state": self._ready_reason,
                "reason": self._unhealthy_reason,
            }
        if self._faults is not None:
            snap["ready"] = snap["ready"] and self._models_left()
            snap["models_ready"] = self._faults.ready_models()
            snap["faults"] = self._faults.snapshot()
        return snap


def _handler(state: HealthState, metrics: WorkerMetrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
            elif path in ("/healthz", "/readyz"):
                snap = state.snapshot()
                ok = snap["healthy"] if path == "/healthz" else snap["ready"]
                self._send(200 if ok else 503, json.dumps(snap).encode(), "application/json")
            else:
                self._send(404, b'{"error": "not found"}', "application/json")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # Scrapes every few seconds would drown the job lines.
            return

    return Handler


class StatusServer:
    """Serves health and metrics from a daemon thread until ``stop``."""

    def __init__(self, host: str, port: int, state: HealthState, metrics: WorkerMetrics) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(state, metrics))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="status-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("status server listening", extra={"port": self.port})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

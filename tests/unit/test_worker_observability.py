"""JSON logs, metrics, health/readiness over a real HTTP server, and signal handling."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.health import HealthState, StatusServer
from worker.lifecycle import Shutdown
from worker.logs import JsonFormatter, job_logger, log_stage
from worker.metrics import WorkerMetrics


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.threads: set[str] = set()  # where the lines were formatted
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.threads.add(threading.current_thread().name)


@pytest.fixture
def captured() -> Iterator[ListHandler]:
    handler = ListHandler()
    logger = logging.getLogger("genworker.job")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def test_job_fields_are_bound_and_stage_lines_carry_elapsed_ms(captured: ListHandler) -> None:
    log = job_logger("gen_123", "tiny-wan", 2)
    with log_stage(log, "encoding"):
        pass
    log.info("claimed", extra={"stage": "claimed"})
    first, second = (json.loads(line) for line in captured.lines)
    assert first["job_id"] == "gen_123" and first["model"] == "tiny-wan" and first["attempt"] == 2
    assert first["stage"] == "encoding" and first["msg"] == "stage encoding done"
    assert isinstance(first["elapsed_ms"], float) and first["elapsed_ms"] >= 0
    assert second["stage"] == "claimed" and second["job_id"] == "gen_123"


def test_a_stage_that_raises_is_logged_as_stopped(captured: ListHandler) -> None:
    log = job_logger("gen_9", "tiny-wan", 1)
    with pytest.raises(ValueError), log_stage(log, "denoising"):
        raise ValueError("boom")
    assert json.loads(captured.lines[-1])["msg"] == "stage denoising stopped"


# What ``genworker worker`` does before it runs (worker/cli.py: ``configure_logging``), then lines logged and the
# process killed outright at once: no exit handler, no flush at shutdown.
_LOG_THEN_KILL = """
import os, signal
from worker.logs import configure_logging, job_logger
configure_logging("INFO")
log = job_logger("gen_7", "tiny-wan", 1)
for i in range(200):
    log.info("line %d", i, extra={"stage": "claimed"})
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_worker_killed_outright_has_written_every_line_it_logged() -> None:
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", _LOG_THEN_KILL]
    done = subprocess.run(command, check=False, cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [line["msg"] for line in lines] == [f"line {i}" for i in range(200)]
    assert all(line["job_id"] == "gen_7" for line in lines)


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_health_readiness_and_metrics_endpoints() -> None:
    metrics = WorkerMetrics()
    state = HealthState(metrics)
    server = StatusServer("127.0.0.1", 0, state, metrics)
    server.start()
    try:
        assert _get(server.port, "/healthz")[0] == 200
        assert _get(server.port, "/readyz")[0] == 503  # not ready until setup says so
        state.set_ready(True, "ready")
        assert _get(server.port, "/readyz")[0] == 200
        metrics.jobs.labels("tiny-wan", "failed", "timeout").inc()
        metrics.jobs.labels("tiny-wan", "failed", "timeout").inc()
        status, body = _get(server.port, "/metrics")
        assert status == 200
        text = body.decode()
        assert 'genworker_jobs_total{code="timeout",model="tiny-wan",status="failed"} 2.0' in text
        assert "genworker_ready 1.0" in text
        state.mark_unhealthy("stuck in a step")
        status, body = _get(server.port, "/healthz")
        assert status == 503 and json.loads(body)["reason"] == "stuck in a step"
        assert _get(server.port, "/readyz")[0] == 503  # an unhealthy worker is never ready
        assert "genworker_healthy 0.0" in _get(server.port, "/metrics")[1].decode()
        assert _get(server.port, "/nope")[0] == 404
    finally:
        server.stop()


def test_first_signal_drains_second_stops() -> None:
    shutdown = Shutdown()
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    shutdown.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert shutdown.draining.wait(5)
        assert not shutdown.stop_now.is_set()
        assert shutdown.drain_started is not None
        os.kill(os.getpid(), signal.SIGINT)
        assert shutdown.stop_now.wait(5)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])

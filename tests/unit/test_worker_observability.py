"""JSON logs, metrics, health/readiness over a real HTTP server, and signal handling."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from worker import logs as daemon_logs
from worker.health import HealthState, StatusServer
from worker.lifecycle import Shutdown
from worker.logs import JsonFormatter, job_logger, log_stage, write_logs_in_background
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


def _in_background(name: str) -> tuple[logging.Logger, ListHandler]:
    """A logger of its own whose lines go through the background writer into a ``ListHandler``."""
    logger = logging.getLogger(name)
    logger.propagate, logger.level = False, logging.INFO
    target = ListHandler()
    logger.handlers[:] = [target]
    write_logs_in_background(logger)
    return logger, target


def test_lines_written_in_background_come_out_in_order_as_logged() -> None:
    logger, target = _in_background("genworker.test-background")
    log = job_logger("gen_7", "tiny-wan", 1, name=logger.name)
    models = ["tiny-wan"]
    log.info("claimed %s", models, extra={"stage": "claimed"})
    models.append("tiny-ltx2")  # changed after the line was logged: the line keeps what it was
    try:
        raise ValueError("boom")
    except ValueError as e:
        log.error("failed: %s", e, exc_info=e)
    for i in range(100):
        log.info("line %d", i)
    logger.handlers[0].close()  # what logging.shutdown does at exit: what is queued is written
    logger.handlers.clear()
    lines = [json.loads(line) for line in target.lines]
    assert lines[0]["msg"] == "claimed ['tiny-wan']" and lines[0]["job_id"] == "gen_7"
    assert lines[1]["msg"] == "failed: boom" and "ValueError: boom" in lines[1]["exc"]
    assert [line["msg"] for line in lines[2:]] == [f"line {i}" for i in range(100)]
    assert threading.current_thread().name not in target.threads


def test_the_writer_writes_what_came_on_its_own_within_a_few_passes() -> None:
    logger, target = _in_background("genworker.test-background-timer")
    logger.info("first")  # wakes nobody: the line waits for the writer's next pass
    deadline = time.monotonic() + 2
    while not target.lines and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [json.loads(line)["msg"] for line in target.lines] == ["first"]  # written with no close
    assert target.threads == {"log-writer"}
    logger.handlers[0].close()
    logger.handlers.clear()


def test_a_warning_wakes_the_writer_and_comes_out_after_the_lines_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemon_logs, "WRITE_EVERY_S", 60.0)  # no timed pass within this test
    logger, target = _in_background("genworker.test-background-wake")
    logger.info("before")
    time.sleep(0.2)
    assert target.lines == []  # an INFO line waits for the writer's next pass
    logger.warning("now")
    deadline = time.monotonic() + 5
    while len(target.lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [json.loads(line)["msg"] for line in target.lines] == ["before", "now"]
    logger.handlers[0].close()
    logger.handlers.clear()


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

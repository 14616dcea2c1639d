"""The sender's shares and its circuit breaker, over a real queue and real loopback receivers: at most K
attempts in flight per endpoint and per project; an endpoint that keeps timing out is held (its log says
why), probed, closed again when it answers, or disabled for good; and the figures in the metrics."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from api.webhooks.breaker import after_attempt, held_until, in_flight_limit
from api.webhooks.models import DeliveryState, Endpoint, EventType
from api.webhooks.sender import Sender
from api.webhooks.service import Webhooks, open_webhooks
from api.webhooks.transport import PostResult
from foundation.core.catalog import Catalog
from foundation.queue.base import JobQueue
from foundation.queue.factory import open_queue
from foundation.settings import WebhookSettings
from tests.webhooks.conftest import Receiver, hook_settings, run_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT = PostResult(None, "ReadTimeout: timed out", timed_out=True)


def _endpoint() -> Endpoint:
    return Endpoint(id="wh_1", project="p", url="https://h/", events=list(EventType), sealed_secret="x", created_at=T0)


# ------------------------------------------------------------------------------------- the rule alone
def test_the_circuit_opens_doubles_caps_and_closes() -> None:
    s = WebhookSettings(circuit_after_failures=3, circuit_open_s=10, circuit_max_open_s=25)
    e, opened_at = _endpoint(), []
    for n in range(1, 6):
        step = after_attempt(e, TIMEOUT, T0 + timedelta(seconds=n), s)
        e = step.endpoint
        assert step.opened == (n >= 3) and not step.disabled
        if step.opened:
            assert e.circuit_open_until is not None
            opened_at.append((e.circuit_open_until - (T0 + timedelta(seconds=n))).total_seconds())
    assert opened_at == [10, 20, 25]  # doubled per failed probe, capped
    assert in_flight_limit(e, s) == 1  # half-open: one probe at a time
    assert held_until(e, T0 + timedelta(seconds=6)) == e.circuit_open_until
    assert held_until(e, T0 + timedelta(seconds=60)) is None
    closed = after_attempt(e, PostResult(204), T0 + timedelta(seconds=60), s).endpoint
    assert (closed.consecutive_failures, closed.circuit_open_until, closed.failing_since) == (0, None, None)
    assert in_flight_limit(closed, s) == s.max_in_flight_per_endpoint


def test_the_breaker_disables_only_after_the_run_spans_its_time() -> None:
    s = WebhookSettings(circuit_after_failures=2, disable_after_failures=3, disable_after_s=3600)
    e = _endpoint()
    for n in range(4):  # four failures within a minute: held, never disabled
        e = after_attempt(e, TIMEOUT, T0 + timedelta(seconds=n), s).endpoint
    assert e.active
    step = after_attempt(e, TIMEOUT, T0 + timedelta(hours=2), s)
    assert step.disabled and not step.endpoint.active
    assert step.endpoint.disabled_reason is not None and "circuit breaker: 5 failed" in step.endpoint.disabled_reason


# ------------------------------------------------------------------------------------ real receivers
class Gate:
    """An HTTP receiver that holds every request until ``open`` is set, counting those in flight per path."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.peak_total = 0
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                project = self.path.split("/")[1]
                with gate.lock:
                    gate.now[self.path] += 1
                    gate.now[project] += 1
                    gate.peak[self.path] = max(gate.peak[self.path], gate.now[self.path])
                    gate.peak[project] = max(gate.peak[project], gate.now[project])
                    gate.peak_total = max(gate.peak_total, sum(v for k, v in gate.now.items() if "/" not in k))
                gate.open.wait(30)
                with gate.lock:
                    gate.now[self.path] -= 1
                    gate.now[project] -= 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, project: str, n: int) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{project}/{n}"

    def close(self) -> None:
        self.open.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.close()


def _wait(check: Callable[[], bool], what: str, timeout_s: float = 20.0, tick: Callable[[], Any] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if tick is None or not tick():
            time.sleep(0.02)


def _figure(sender: Sender, series: str) -> float:
    for line in generate_latest(sender.metrics.registry).decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no series {series}")


def _open(tmp_path: Path, **hooks: Any) -> tuple[JobQueue, Webhooks, Sender]:
    settings = hook_settings(tmp_path, **hooks)
    queue = open_queue(settings.queue)
    service = open_webhooks(settings)
    sender = Sender(queue, service.store, service.sealer, service.transport, settings.webhooks)
    return queue, service, sender


def test_at_most_k_in_flight_per_endpoint_and_per_project(tmp_path: Path, gate: Gate, catalog: Catalog) -> None:
    queue, hooks, sender = _open(tmp_path, max_in_flight_per_endpoint=2, max_in_flight_per_project=3)
    try:
        for n in range(3):
            hooks.add_endpoint("busy", gate.url("busy", n))
        hooks.add_endpoint("calm", gate.url("calm", 0))
        for _ in range(4):
            run_job(queue, catalog, "busy")  # 4 jobs x 2 events x 3 endpoints = 24 deliveries
        run_job(queue, catalog, "calm")
        _wait(lambda: gate.now["calm"] == 2, "calm's two deliveries in flight beside busy's", tick=sender.run_once)
        for _ in range(20):  # more rounds while everything is held: nothing more may start
            sender.run_once()
        assert gate.peak["busy"] == 3 and gate.peak["calm"] == 2
        assert max(gate.peak[f"/busy/{n}"] for n in range(3)) <= 2
        gate.open.set()
        done = {DeliveryState.delivered}

        def all_delivered() -> bool:
            found = [d.state for e in hooks.store.list_endpoints() for d in hooks.store.list_deliveries(e.id)]
            return len(found) == 26 and set(found) == done

        _wait(all_delivered, "every delivery", tick=sender.run_once)
        assert gate.peak["busy"] == 3 and max(gate.peak[f"/busy/{n}"] for n in range(3)) <= 2
    finally:
        gate.open.set()
        sender.close()
        hooks.close()
        queue.close()


def test_an_endpoint_that_keeps_timing_out_is_held_then_probed_then_closed(
    tmp_path: Path, gate: Gate, catalog: Catalog
) -> None:
    queue, hooks, sender = _open(
        tmp_path, timeout_s=0.3, circuit_after_failures=2, circuit_open_s=1.0, backoff_base_s=0.05, backoff_cap_s=0.1
    )
    try:
        endpoint, _ = hooks.add_endpoint("p", gate.url("p", 0), [EventType.generation_succeeded])
        for _ in range(3):
            run_job(queue, catalog, "p")

        def opened() -> bool:
            stored = hooks.store.get_endpoint(endpoint.id)
            return stored is not None and stored.circuit_open_until is not None

        _wait(opened, "the circuit to open", tick=sender.run_once)
        held = lambda: [d for d in hooks.store.list_deliveries(endpoint.id) if d.held_reason]  # noqa: E731
        _wait(lambda: bool(held()), "a delivery held by the open circuit", tick=sender.run_once)
        reason = held()[0].held_reason
        assert reason is not None and "circuit open" in reason
        # At least: a probe may have failed (and reopened the circuit) by the time the figures are read.
        assert _figure(sender, "genworker_webhook_circuit_opened_total") >= 1
        assert _figure(sender, 'genworker_webhook_attempts_total{result="timeout"}') >= 2

        gate.open.set()  # the receiver answers again: the next probe closes the circuit, the backlog goes
        _wait(
            lambda: [d.state for d in hooks.store.list_deliveries(endpoint.id)] == [DeliveryState.delivered] * 3,
            "the backlog after the probe",
            tick=sender.run_once,
        )
        stored = hooks.store.get_endpoint(endpoint.id)
        assert stored is not None and stored.circuit_open_until is None and stored.consecutive_failures == 0
        assert all(d.held_reason is None for d in hooks.store.list_deliveries(endpoint.id))
        metrics = generate_latest(sender.metrics.registry).decode()
        assert 'genworker_webhook_deliveries_total{result="delivered"} 3.0' in metrics
        assert "genworker_webhook_delivery_seconds_count 3.0" in metrics
    finally:
        gate.open.set()
        sender.close()
        hooks.close()
        queue.close()


def test_the_breaker_disables_an_endpoint_and_the_log_and_metrics_say_so(
    tmp_path: Path, receiver: Receiver, catalog: Catalog
) -> None:
    queue, hooks, sender = _open(
        tmp_path,
        circuit_after_failures=2,
        circuit_open_s=0.05,
        disable_after_failures=4,
        disable_after_s=0.0,
        backoff_base_s=0.05,
        backoff_cap_s=0.1,
    )
    try:
        receiver.default = 503
        endpoint, _ = hooks.add_endpoint("p", receiver.url, [EventType.generation_succeeded])
        run_job(queue, catalog, "p")
        _wait(
            lambda: [d.state for d in hooks.store.list_deliveries(endpoint.id)] == [DeliveryState.failed],
            "the delivery failed by the disabled endpoint",
            tick=sender.run_once,
        )
        stored = hooks.store.get_endpoint(endpoint.id)
        assert stored is not None and not stored.active
        assert stored.disabled_reason is not None and stored.disabled_reason.startswith("circuit breaker: 4 failed")
        [d] = hooks.store.list_deliveries(endpoint.id)
        assert d.failure_reason is not None and d.failure_reason.startswith("endpoint disabled: circuit breaker")
        metrics = generate_latest(sender.metrics.registry).decode()
        assert "genworker_webhook_endpoints_disabled_total 1.0" in metrics
        assert 'genworker_webhook_attempts_total{result="http_error"} 4.0' in metrics
        assert 'genworker_webhook_deliveries_total{result="failed"} 1.0' in metrics
    finally:
        sender.close()
        hooks.close()
        queue.close()

"""The Prometheus rules of ``deploy/prometheus``: valid, unit-tested alert by alert, reading only
metrics that exist, documented in the runbooks, and one alert watched firing for real.

The live test runs Debian's Prometheus on loopback scraping a real ``genworker worker`` (embedded
backends, a tiny model) and the API over the same queue, kills the worker, and sees
``GenworkerNoReadyWorker`` go pending and then firing while the API stays up. Its rule is the real one,
expression unchanged; only ``for:`` and the intervals are shortened.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from foundation.settings import settings_env
from tests.deploy.kube import ROOT
from tests.deploy.prometheus_server import PrometheusServer
from tests.deploy.promql import EXTERNAL, metric_names, webhook_metric_names, worker_metric_names
from tests.e2e.conftest import Stack, start_stack
from tests.integration.worker_harness import WorkerProcess

PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "rules.yaml"
UNIT_TESTS = PROM / "tests" / "rules_test.yaml"
OPERATORS = ROOT / "docs" / "operators.md"
LIVE_FOR_S = 5
LIVE_MODEL = "tiny-wan"


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [r for r in _rules() if "alert" in r]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make deps` (Debian package prometheus)"
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)


def test_promtool_checks_the_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_promtool_unit_tests_pass_and_cover_every_alert() -> None:
    done = _promtool("test", "rules", str(UNIT_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    tests = yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")  # a case where the alert does fire, not only one where it stays quiet
    }
    assert fired == {a["alert"] for a in _alerts()}


def test_rules_read_only_metrics_that_exist() -> None:
    known = worker_metric_names() | webhook_metric_names() | set(EXTERNAL)
    recorded: set[str] = set()
    for rule in _rules():  # a recording rule may use the ones recorded above it
        unknown = metric_names(rule["expr"]) - known - recorded
        assert not unknown, f"{rule.get('record') or rule.get('alert')} reads unknown metrics {unknown}"
        if "record" in rule:
            recorded.add(rule["record"])


def test_every_alert_has_a_runbook_paragraph() -> None:
    docs = OPERATORS.read_text(encoding="utf-8")
    for alert in _alerts():
        name = alert["alert"]
        assert alert["annotations"]["runbook"] == f"docs/operators.md#{name.lower()}", name
        assert re.search(rf"^#### {name}$", docs, re.MULTILINE), f"docs/operators.md has no runbook heading for {name}"


# ------------------------------------------------------------------------------------------- live
def _live_rules(path: Path) -> Path:
    """The real GenworkerNoReadyWorker, expression unchanged, with a ``for:`` a test can wait for."""
    (rule,) = [a for a in _alerts() if a["alert"] == "GenworkerNoReadyWorker"]
    rule = {**rule, "for": f"{LIVE_FOR_S}s"}
    path.write_text(yaml.safe_dump({"groups": [{"name": "live", "rules": [rule]}]}), encoding="utf-8")
    return path


@pytest.fixture
def worker(tmp_path: Path, tiny_models_dir: Path) -> Iterator[WorkerProcess]:
    data = tmp_path / "var"
    env = settings_env(
        {
            "data_dir": str(data),
            "queue": {"backend": "sqlite", "sqlite_path": str(data / "queue.db")},
            "store": {"backend": "local", "local_root": str(data / "artifacts")},
            "models": {"tiny_models_dir": str(tiny_models_dir)},
            "worker": {"hosted_models": [LIVE_MODEL], "heartbeat_s": 1},
        }
    )
    proc = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def api(tmp_path: Path, worker: WorkerProcess) -> Iterator[Stack]:
    """The HTTP tier over the worker's queue (the same SQLite file), as ``genworker up`` runs it."""
    stack = start_stack(tmp_path / "var")
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def prometheus(tmp_path: Path, worker: WorkerProcess, api: Stack) -> Iterator[PrometheusServer]:
    api_target = api.base_url.removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
        "rule_files": [str(_live_rules(tmp_path / "rules.yaml"))],
        "scrape_configs": [
            {"job_name": "genworker-worker", "static_configs": [{"targets": [f"127.0.0.1:{worker.port}"]}]},
            {"job_name": "genworker-api", "static_configs": [{"targets": [api_target]}]},
        ],
    }
    path = tmp_path / "prometheus.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    server = PrometheusServer(path, tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


def _wait(what: str, check: Any, timeout_s: float, server: PrometheusServer) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(0.2)
    raise AssertionError(f"{what} not seen within {timeout_s}s:\n{server.log_tail()}")


def test_killing_the_last_worker_of_a_model_fires_no_ready_worker(
    worker: WorkerProcess, api: Stack, prometheus: PrometheusServer
) -> None:
    worker.wait_ready()
    ready = f'genworker_model_ready{{model="{LIVE_MODEL}"}} == 1'
    _wait("the ready worker in Prometheus", lambda: prometheus.query(ready), 30, prometheus)
    assert not prometheus.alerts("GenworkerNoReadyWorker")
    with api.client() as c:
        assert c.get("/v1/models").status_code == 200
    served = 'genworker_api_requests_total{route="/v1/models",status="200"} >= 1'
    _wait("the API's requests in Prometheus", lambda: prometheus.query(served), 30, prometheus)

    worker.signal(signal.SIGKILL)
    worker.wait_exit(10)
    killed = time.monotonic()
    states: list[tuple[float, str]] = []

    def state(wanted: str) -> bool:
        alerts = prometheus.alerts("GenworkerNoReadyWorker")
        assert all(a["labels"]["model"] == LIVE_MODEL for a in alerts), alerts
        if alerts and (not states or states[-1][1] != alerts[0]["state"]):
            states.append((time.monotonic(), alerts[0]["state"]))
        return bool(alerts) and alerts[0]["state"] == wanted

    _wait("the alert pending", lambda: state("pending"), 10, prometheus)
    _wait("the alert firing", lambda: state("firing"), LIVE_FOR_S + 10, prometheus)
    assert [s for _, s in states] == ["pending", "firing"]
    pending_at, firing_at = states[0][0], states[1][0]
    # Pending from the first failed scrape on; firing once `for:` has passed, not before.
    assert pending_at - killed < 5
    assert LIVE_FOR_S - 1 <= firing_at - pending_at <= LIVE_FOR_S + 3
    (up,) = prometheus.query('up{job="genworker-worker"}')
    assert up["value"][1] == "0"
    (api_up,) = prometheus.query('up{job="genworker-api"}')
    assert api_up["value"][1] == "1"

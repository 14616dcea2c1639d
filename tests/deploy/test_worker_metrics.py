"""The worker metrics the alerts added: ready state per hosted model and the card's total memory."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from worker.health import HealthState
from worker.metrics import WorkerMetrics


def _samples(metrics: WorkerMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_model_ready_follows_readiness_for_every_hosted_model() -> None:
    metrics = WorkerMetrics()
    metrics.host(["tiny-wan", "tiny-ltx2"])
    health = HealthState(metrics)
    ready = (("model", "tiny-ltx2"),), (("model", "tiny-wan"),)
    assert _samples(metrics, "genworker_model_ready") == dict.fromkeys(ready, 0.0)
    health.set_ready(True, "ready")
    assert _samples(metrics, "genworker_model_ready") == dict.fromkeys(ready, 1.0)
    health.set_ready(False, "draining")
    assert _samples(metrics, "genworker_model_ready") == dict.fromkeys(ready, 0.0)
    health.set_ready(True, "ready")
    health.mark_unhealthy("stuck")
    assert _samples(metrics, "genworker_model_ready") == dict.fromkeys(ready, 0.0)
    assert _samples(metrics, "genworker_ready") == {(): 0.0}


def test_gpu_memory_includes_the_card_total(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 1,
        memory_allocated=lambda i: 10,
        memory_reserved=lambda i: 20,
        get_device_properties=lambda i: SimpleNamespace(total_memory=80),
    )
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    metrics = WorkerMetrics()
    metrics.sample_gpu_memory()
    got = _samples(metrics, "genworker_gpu_memory_bytes")
    assert got == {
        (("device", "0"), ("kind", "allocated")): 10.0,
        (("device", "0"), ("kind", "reserved")): 20.0,
        (("device", "0"), ("kind", "total")): 80.0,
    }

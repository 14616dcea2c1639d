"""The two fleet metrics the alerts read: lapsed leases re-queued by the heartbeat's sweep
(``genworker_leases_reclaimed_total``) and a job's age at claim (``genworker_queue_wait_seconds``),
against a real (SQLite) queue."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import utcnow
from foundation.queue.base import WorkerHeartbeat
from foundation.queue.sqlite.backend import SqliteQueue
from tests.integration.worker_harness import make_record
from worker.faults import LocalFaults
from worker.lease import Heartbeat, LeaseKeeper
from worker.metrics import WorkerMetrics
from worker.runner import JobRunner

CATALOG = load_catalog()
LEASE_S = 1.0


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[SqliteQueue]:
    q = SqliteQueue(tmp_path / "queue.db", lease_ttl_s=LEASE_S)
    yield q
    q.close()


def sample(metrics: WorkerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_the_heartbeat_counts_the_lapsed_leases_it_re_queues(queue: SqliteQueue) -> None:
    for _ in range(2):
        queue.enqueue(make_record(CATALOG, "tiny-wan"))
        assert queue.claim("dead-worker", ["tiny-wan"]) is not None  # never renewed: it died
    metrics = WorkerMetrics()
    beat = WorkerHeartbeat(worker_id="w2", hosted_models=["tiny-wan"])
    heartbeat = Heartbeat(queue, 60, 0, lambda: beat, metrics)
    heartbeat.tick()
    assert sample(metrics, "genworker_leases_reclaimed_total") == 0  # the leases still run
    time.sleep(2 * LEASE_S)
    heartbeat.tick()
    assert sample(metrics, "genworker_leases_reclaimed_total") == 2
    heartbeat.tick()
    assert sample(metrics, "genworker_leases_reclaimed_total") == 2  # counted once


def test_a_claim_observes_the_job_age_by_model(queue: SqliteQueue, tmp_path: Path) -> None:
    record = make_record(CATALOG, "tiny-wan")
    queue.enqueue(record.model_copy(update={"created_at": utcnow() - timedelta(seconds=90)}))
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None
    metrics = WorkerMetrics()
    leases = LeaseKeeper(queue, LEASE_S, hang_margin_s=60, on_hang=lambda reason: None)
    runner = JobRunner(
        catalog=CATALOG,
        queue=queue,
        cache=object(),  # type: ignore[arg-type]  # begin() loads nothing
        leases=leases,
        settler=object(),  # type: ignore[arg-type]
        metrics=metrics,
        faults=LocalFaults(metrics, ["tiny-wan"], worker_id="w1", base_s=1, cap_s=1, load_failure_workers=3),
        stop_now=threading.Event(),
        progress_interval_s=1,
        work_root=tmp_path,
    )
    runner.begin(claim)
    assert sample(metrics, "genworker_queue_wait_seconds_count", model="tiny-wan") == 1
    waited = sample(metrics, "genworker_queue_wait_seconds_sum", model="tiny-wan")
    assert 90 <= waited < 120, waited
    assert sample(metrics, "genworker_queue_wait_seconds_bucket", model="tiny-wan", le="60.0") == 0
    assert sample(metrics, "genworker_queue_wait_seconds_bucket", model="tiny-wan", le="120.0") == 1


def test_the_heartbeat_says_which_newer_versions_jobs_it_left_and_failed(
    queue: SqliteQueue, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job a newer version wrote (its row stamped with a newer record format): the worker's heartbeat
    logs it and counts it once as left, then once as failed when it waited past the wait in vain."""
    import sqlite3
    from contextlib import closing

    patient = SqliteQueue(tmp_path / "queue.db", lease_ttl_s=LEASE_S, newer_record_wait_s=0.5)
    record = queue.enqueue(make_record(CATALOG, "tiny-wan")).record
    with closing(sqlite3.connect(tmp_path / "queue.db")) as conn, conn:
        conn.execute("UPDATE jobs SET record_format = 2 WHERE id = ?", (record.id,))
    metrics = WorkerMetrics()
    beat = WorkerHeartbeat(worker_id="w1", hosted_models=["tiny-wan"])
    heartbeat = Heartbeat(patient, 60, 0, lambda: beat, metrics)
    caplog.set_level("INFO", logger="genworker.lease")
    heartbeat.tick()
    heartbeat.tick()
    assert sample(metrics, "genworker_newer_records_total", model="tiny-wan", outcome="left") == 1
    said = [r for r in caplog.records if r.getMessage().startswith("a newer version's job left")]
    assert [getattr(r, "job_id", None) for r in said] == [record.id]
    deadline = time.monotonic() + 10
    while sample(metrics, "genworker_newer_records_total", model="tiny-wan", outcome="failed") == 0:
        assert time.monotonic() < deadline, "never failed"
        time.sleep(0.05)
        heartbeat.tick()
    heartbeat.tick()
    assert sample(metrics, "genworker_newer_records_total", model="tiny-wan", outcome="failed") == 1
    failed = patient.get(record.id)
    assert failed is not None and failed.error is not None and failed.error.code.value == "version_unavailable"
    patient.close()

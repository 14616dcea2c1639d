"""Embedded mode (what ``genworker up`` runs): the worker on the SQLite queue and the local artifact
directory, configured only by the environment ``genworker up`` passes to it. Then a model that hangs
inside one step: the worker reports unhealthy, drops the lease (the job is re-queued), and SIGTERM
still ends the process.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import Status
from foundation.queue.base import JobQueue
from foundation.settings import settings_env
from tests.integration.worker_harness import (
    WorkerProcess,
    make_record,
    status_is,
    terminal,
    wait_for,
    write_test_catalog,
)
from tests.integration.worker_media import assert_playable_mp4


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[dict[str, Any]]:
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue

    tmp = tmp_path_factory.mktemp("worker-embedded")
    data = tmp / "var"
    catalog_path = write_test_catalog(tmp / "catalog.yaml")
    up = {  # what `genworker up` sets for its worker
        "data_dir": str(data),
        "queue": {"backend": "sqlite", "sqlite_path": str(data / "queue.db")},
        "store": {"backend": "local", "local_root": str(data / "artifacts")},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
    }
    # test-only: the catalog with the hanging model, a short lease and fast detection of the hang
    test_only = {
        "catalog_path": str(catalog_path),
        "queue": {"lease_ttl_s": 3},
        "worker": {
            "hosted_models": ["tiny-wan", "tiny-ltx2", "hang-wan"],
            "hang_margin_s": 1,
            "reclaim_interval_s": 1,
            "heartbeat_s": 1,
            "drain_grace_s": 1,
        },
    }
    env = {**settings_env(up), **settings_env(test_only)}
    queue = open_queue(QueueSettings(backend="sqlite", sqlite_path=str(data / "queue.db"), lease_ttl_s=3))
    worker = WorkerProcess(env, tmp / "worker.log").start()
    try:
        worker.wait_ready()
        yield {"worker": worker, "queue": queue, "catalog": load_catalog(catalog_path), "data": data}
    finally:
        worker.stop()
        queue.close()


def test_embedded_happy_path_on_sqlite_and_the_local_store(embedded: dict[str, Any]) -> None:
    queue: JobQueue = embedded["queue"]
    record = make_record(embedded["catalog"], "tiny-ltx2", resolution="144p", ratio="1:1", duration_seconds=1)
    queue.enqueue(record)
    done, seen = wait_for(queue, record.id, terminal)
    assert done.status is Status.succeeded, done.error
    assert Status.running in {r.status for r in seen}
    assert [e.status for e in queue.events(record.id)] == [Status.queued, Status.running, Status.succeeded]
    video = next(a for a in done.artifacts if a.kind == "video")
    path = embedded["data"] / "artifacts" / video.key
    assert path.is_file() and path.stat().st_size == video.bytes
    assert_playable_mp4(path.read_bytes(), width=144, height=144, frames=8, duration_s=1.0, audio_channels=2)


def test_a_step_that_hangs_makes_the_worker_unhealthy_and_its_job_is_requeued(embedded: dict[str, Any]) -> None:
    queue: JobQueue = embedded["queue"]
    worker: WorkerProcess = embedded["worker"]
    record = make_record(embedded["catalog"], "hang-wan")
    queue.enqueue(record)
    wait_for(queue, record.id, status_is(Status.running))
    # Time limit 6 s + margin 1 s: the lease keeper gives up on it, the lease lapses, the job goes back.
    requeued, _ = wait_for(queue, record.id, lambda r: r.status is Status.queued and r.attempt == 1, timeout_s=60)
    assert requeued.status is Status.queued
    assert worker.get("/healthz")[0] == 503
    assert worker.get("/readyz")[0] == 503
    # The stuck thread cannot be joined: after the drain grace the process releases what it holds and exits.
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout_s=60) == 0

"""A worker's start-up logs no error: its heartbeat thread starts before the worker has imported torch (the
main thread imports it while preloading), and the first beats used to read a half-imported torch
(``partially initialized module 'torch' has no attribute 'cuda'``), an ERROR at every start. Now the
heartbeat's GPU sample waits for that import; the beats themselves go on (the worker shows as not ready)."""

from __future__ import annotations

import json
from pathlib import Path

from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.settings import settings_env
from tests.integration.worker_harness import WorkerProcess, wait_until


def test_a_worker_starts_without_a_heartbeat_error(tmp_path: Path, tiny_models_dir: Path) -> None:
    data = tmp_path / "var"
    settings = {
        "data_dir": str(data),
        "queue": {"backend": "sqlite", "sqlite_path": str(data / "queue.db")},
        "store": {"backend": "local", "local_root": str(data / "artifacts")},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        # Beats every 0.1 s: many of them land while the main thread imports torch to preload.
        "worker": {"hosted_models": ["tiny-wan"], "preload": ["tiny-wan"], "heartbeat_s": 0.1, "drain_grace_s": 1},
    }
    log = tmp_path / "worker.log"
    worker = WorkerProcess({**settings_env(settings), "HF_HUB_OFFLINE": "1"}, log).start()
    try:
        worker.wait_ready()
        queue = open_queue(QueueSettings(backend="sqlite", sqlite_path=str(data / "queue.db")))
        try:  # and it beats, ready (a 0.3 s heartbeat life: waited for, not read once)
            wait_until(lambda: [beat.ready for beat in queue.live_workers()] == [True], "a ready beat", 30)
        finally:
            queue.close()
    finally:
        worker.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    errors = [line for line in lines if line["level"] in ("error", "critical")]
    assert errors == [], errors
    assert any(line["msg"] == "ready" for line in lines)


def test_a_worker_started_while_redis_is_down_waits_and_becomes_ready_when_it_returns(
    tmp_path: Path, tiny_models_dir: Path
) -> None:
    """No exit (on Kubernetes a crash loop for as long as Redis is down): the worker answers /readyz 503 with the
    reason, retries with backoff, and is ready once a redis-server listens on its URL."""
    from tests.fixtures.redis_server import start_redis

    redis = start_redis(tmp_path / "redis")
    redis.stop()  # its port is known and, for now, refused
    data = tmp_path / "var"
    settings = {
        "data_dir": str(data),
        "queue": {"backend": "redis", "redis_url": redis.url},
        "store": {"backend": "local", "local_root": str(data / "artifacts")},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        "worker": {"hosted_models": ["tiny-wan"], "heartbeat_s": 0.5, "drain_grace_s": 1}
        | {"fault_backoff_s": 0.2, "fault_backoff_max_s": 1.0},
    }
    worker = WorkerProcess({**settings_env(settings), "HF_HUB_OFFLINE": "1"}, tmp_path / "worker.log").start()
    try:
        wait_until(lambda: b"queue unavailable" in worker.get("/readyz")[1], "a not-ready worker saying why", 120)
        wait_until(lambda: worker.log_path.read_text().count("queue unavailable at start") >= 2, "retries", 30)
        assert worker.proc is not None and worker.proc.poll() is None
        redis.restart()
        worker.wait_ready(timeout_s=60)
    finally:
        worker.stop()
        redis.stop()


def test_a_worker_whose_work_disk_is_short_claims_nothing_and_says_why(tmp_path: Path, tiny_models_dir: Path) -> None:
    """Free space under ``worker.min_free_disk_mb`` (here more than any disk has): no claim, so no job is denoised
    for an encode that cannot be written; the job stays queued with no attempt used, and /readyz says why."""
    from foundation.core.catalog import load_catalog
    from foundation.core.contract import Status
    from tests.integration.worker_harness import make_record

    data = tmp_path / "var"
    queue_settings = QueueSettings(backend="sqlite", sqlite_path=str(data / "queue.db"))
    settings = {
        "data_dir": str(data),
        "queue": {"backend": "sqlite", "sqlite_path": str(data / "queue.db")},
        "store": {"backend": "local", "local_root": str(data / "artifacts")},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        "worker": {"hosted_models": ["tiny-wan"], "heartbeat_s": 0.5, "drain_grace_s": 1}
        | {"min_free_disk_mb": 10**12, "fault_backoff_s": 0.2, "fault_backoff_max_s": 0.5},
    }
    data.mkdir(parents=True)
    queue = open_queue(queue_settings)
    worker = WorkerProcess({**settings_env(settings), "HF_HUB_OFFLINE": "1"}, tmp_path / "worker.log").start()
    try:
        record = make_record(load_catalog(), "tiny-wan", resolution="144p", duration_seconds=1)
        queue.enqueue(record)
        wait_until(lambda: b"work disk has" in worker.get("/readyz")[1], "a disk fault on /readyz", 120)
        wait_until(lambda: worker.log_path.read_text().count("work disk has") >= 3, "checks repeated", 30)
        stored = queue.get(record.id)
        assert stored is not None and stored.status is Status.queued and stored.attempt == 0
    finally:
        worker.stop()
        queue.close()

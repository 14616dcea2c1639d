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

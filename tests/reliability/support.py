"""Shared pieces of the reliability suite: the invariant check run after every fault, a worker
environment for the tiny ``fast`` jobs, and a SeaweedFS that can be stopped and restarted on the same
ports and data directory (what an operator's restart of the store looks like to the worker), or paused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.core.contract import Status
from foundation.queue.base import JobQueue
from foundation.settings import settings_env
from foundation.stores.base import ArtifactStore
from tests.fixtures.seaweed import SeaweedServer, _command, _free_port_block, _stop, _wait_ready, weed_binary
from tests.integration.worker_harness import WorkerProcess

TERMINAL = {Status.succeeded, Status.failed, Status.canceled}


def worker_env(tmp: Path, redis_url: str, models_dir: Path, catalog: Path, **extra: str) -> dict[str, str]:
    """A worker hosting the tiny models, quick to retry, on a 2 s lease; ``extra``: more variables."""
    settings = {
        "data_dir": str(tmp / "data"),
        "catalog_path": str(catalog),
        "queue": {"backend": "redis", "redis_url": redis_url, "lease_ttl_s": 2, "retry_backoff_s": 0.2},
        "models": {"tiny_models_dir": str(models_dir)},
        "worker": {
            "hosted_models": ["tiny-wan"],
            "preload": ["tiny-wan"],
            "heartbeat_s": 1,
            "reclaim_interval_s": 1,
            "max_backoff_s": 1,
        },
        "encoder": {"preset": "ultrafast"},
    }
    return {**settings_env(settings), **extra}


def s3_store_env(server: SeaweedServer) -> dict[str, str]:
    """The worker settings for ``server`` as its S3 store."""
    store = {
        "backend": "s3",
        "s3_endpoint_url": server.endpoint,
        "s3_bucket": server.bucket,
        "s3_region": server.region,
        "s3_access_key_id": server.access_key,
        "s3_secret_access_key": server.secret_key,
    }
    return settings_env({"store": store})


def assert_invariants(
    queue: JobQueue, ids: list[str], store: ArtifactStore, worker: WorkerProcess | None = None
) -> dict[str, Any]:
    """Every job ends in exactly one terminal state (one terminal event), nothing stays ``running``,
    every succeeded job's objects exist with their recorded size, failed/canceled jobs reference no
    artifact, and the worker answers ``/healthz``. Returns the outcome counts."""
    outcomes: dict[str, int] = {}
    for job_id in ids:
        record = queue.get(job_id)
        assert record is not None, f"{job_id} lost"
        assert record.status in TERMINAL, f"{job_id} is {record.status}"
        terminals = [e.status for e in queue.events(job_id) if e.status in TERMINAL]
        assert terminals == [record.status], f"{job_id}: terminal events {terminals}"
        if record.status is Status.succeeded:
            assert {a.kind for a in record.artifacts} >= {"video"}, record
            for artifact in record.artifacts:
                assert f"/{job_id}/{record.attempt}-" in artifact.key  # generations/<id>/<attempt>-<claim>/
                assert object_size(store, artifact.key) == artifact.bytes, artifact.key
        else:
            assert record.artifacts == [], f"{job_id} {record.status} but references {record.artifacts}"
        label = record.status.value + (f":{record.error.code.value}" if record.error else "")
        outcomes[label] = outcomes.get(label, 0) + 1
    if worker is not None:
        assert worker.get("/healthz")[0] == 200, worker.log_tail()
        assert worker.proc is not None and worker.proc.poll() is None
    return outcomes


def object_size(store: ArtifactStore, key: str) -> int | None:
    """The stored object's size: HEAD on S3, stat on the local store."""
    client = getattr(store, "_client", None) or getattr(store, "client", None)
    if hasattr(store, "path_for"):
        path = store.path_for(key)
        return path.stat().st_size if path.is_file() else None
    assert client is not None, "unknown store type"
    try:
        return int(client.head_object(Bucket=store.bucket, Key=key)["ContentLength"])  # type: ignore[attr-defined]
    except Exception:  # NoSuchKey, 404
        return None


@dataclass
class RestartableSeaweed:
    """``weed mini`` on a fixed block of ports and one data dir: ``stop`` then ``start`` keeps the
    endpoint, bucket and objects, as an operator's restart does."""

    work_dir: Path
    server: SeaweedServer | None = None
    _base: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> SeaweedServer:
        config = self.work_dir / "s3-identities.json"
        if not config.exists():
            self.work_dir.mkdir(parents=True, exist_ok=True)
            identity = {"name": "t", "credentials": [{"accessKey": "rel-ak", "secretKey": "rel-secret-0123456789"}]}
            identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
            config.write_text(json.dumps({"identities": [identity]}))
            self._base = _free_port_block(10)
        data = self.work_dir / "data"
        data.mkdir(exist_ok=True)
        log = (self.work_dir / "weed.log").open("ab")
        self._proc = subprocess.Popen(
            _command(weed_binary(), data, config, self._base),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.work_dir,
            start_new_session=True,
        )
        log.close()
        self.server = SeaweedServer(
            endpoint=f"http://127.0.0.1:{self._base + 6}",
            access_key="rel-ak",
            secret_key="rel-secret-0123456789",
            bucket="reliability",
            region="us-east-1",
            pid=self._proc.pid,
            log_path=self.work_dir / "weed.log",
        )
        _wait_ready(self._proc, self.server)
        return self.server

    def pause(self) -> None:
        """SIGSTOP: the kernel still accepts connections, nothing answers them (a store that hangs)."""
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self._proc is not None:
            _stop(self._proc)

"""The local artifact store's filesystem fills up under a working worker.

The store root is a 2 MiB tmpfs mounted for this module (root only: ``mount -t tmpfs -o size=2m``;
the fixture fails, never skips, when it cannot mount). A filler file takes the free space:

- no room at all: each job retries as transient ``upload_failed`` and then fails with that code;
  no temp (``.part``) file and no object of the failed attempts is left behind;
- room for the first artifact but not the second: the attempt's first object must not be left
  orphaned (not referenced by any record);
- once space is freed, the next job succeeds: the worker stayed healthy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import Status
from foundation.core.errors import ErrorCode
from foundation.settings import settings_env
from tests.fixtures.redis_server import start_redis
from tests.integration.worker_harness import WorkerProcess, make_record, terminal, wait_for, write_test_catalog
from tests.reliability.support import assert_invariants, worker_env

pytestmark = pytest.mark.slow

SIZE = 2 * 1024 * 1024


def mount_tmpfs(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.fail("disk-full test needs root to mount a tmpfs (mount -t tmpfs -o size=2m)", pytrace=False)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(path)], check=False, capture_output=True
    )
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs: {done.stderr.decode(errors='replace')}", pytrace=False)


def fill(root: Path, leave: int) -> Path:
    """Write a filler file so that about ``leave`` bytes stay free on ``root``'s filesystem."""
    filler = root / "filler.bin"
    filler.unlink(missing_ok=True)
    free = shutil.disk_usage(root).free
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


LEASE_TTL_S = 30


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[dict[str, Any]]:
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue
    from foundation.stores.config import StoreSettings
    from foundation.stores.factory import open_store

    tmp = tmp_path_factory.mktemp("disk-full")
    root = tmp / "store"
    mount_tmpfs(root)
    redis = start_redis(tmp / "redis")
    worker: WorkerProcess | None = None
    try:
        catalog = write_test_catalog(tmp / "catalog.yaml")
        store = {"backend": "local", "local_root": str(root), "signing_secret": "reliability-secret-0123456789"}
        # A 30 s lease, not the suite's 2 s: no test here needs one to lapse, and on a loaded machine a worker
        # starved for 2 s lost its lease mid-job (worker_lost in place of upload_failed).
        store_env = settings_env({"store": store, "queue": {"max_attempts": 2, "lease_ttl_s": LEASE_TTL_S}})
        worker = WorkerProcess(worker_env(tmp, redis.url, tiny_models_dir, catalog, **store_env), tmp / "w.log")
        worker.start()
        queue = open_queue(QueueSettings(backend="redis", redis_url=redis.url, lease_ttl_s=LEASE_TTL_S, max_attempts=2))
        settings = StoreSettings(backend="local", local_root=str(root), signing_secret="reliability-secret-0123456789")
        store = open_store(settings, data_dir=tmp)
        worker.wait_ready()
        yield {"root": root, "worker": worker, "queue": queue, "store": store, "catalog": load_catalog(catalog)}
        queue.close()
    finally:
        if worker is not None:
            worker.stop()
        redis.stop()
        subprocess.run(["umount", str(root)], check=False)


def run_job(disk: dict[str, Any]) -> Any:
    record = make_record(disk["catalog"], "tiny-wan", variant="fast", resolution="144p", duration_seconds=1)
    disk["queue"].enqueue(record)
    done, _ = wait_for(disk["queue"], record.id, terminal, timeout_s=90)
    return done


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.name != "filler.bin"]


def test_full_disk_fails_with_upload_failed_and_leaves_nothing(disk: dict[str, Any]) -> None:
    root: Path = disk["root"]
    filler = fill(root, leave=0)
    try:
        done = run_job(disk)
    finally:
        filler.unlink()  # whatever happened, the next tests start with room
    assert done.status is Status.failed
    assert done.error is not None and done.error.code is ErrorCode.upload_failed, done.error
    assert done.attempt == 2  # transient: retried, then failed with its code
    assert files_under(root) == [], files_under(root)
    assert_invariants(disk["queue"], [done.id], disk["store"], disk["worker"])


def test_room_for_one_artifact_leaves_no_orphan(disk: dict[str, Any]) -> None:
    root: Path = disk["root"]
    ok = run_job(disk)  # the sizes of a real job's artifacts
    assert ok.status is Status.succeeded, ok.error
    first = ok.artifacts[0].bytes
    for path in files_under(root):
        path.unlink()
    filler = fill(root, leave=first + 8192)  # the first object fits (tmpfs pages), the second does not
    try:
        done = run_job(disk)
        left = files_under(root)
    finally:
        filler.unlink()
    if done.status is Status.succeeded:
        pytest.fail(f"both artifacts fitted ({[a.bytes for a in done.artifacts]}); the fault did not hit")
    assert done.error is not None and done.error.code is ErrorCode.upload_failed
    assert left == [], f"objects of a failed job left in the store: {left}"


def test_after_space_is_freed_the_next_job_succeeds(disk: dict[str, Any]) -> None:
    time.sleep(0.1)
    done = run_job(disk)
    assert done.status is Status.succeeded, done.error
    assert_invariants(disk["queue"], [done.id], disk["store"], disk["worker"])

"""The artifact store and the queue server go away under a working worker, and come back.

One ``genworker worker`` process for the module, on its own redis-server (AOF, fsync always) and its
own SeaweedFS, both restartable on the same port and data directory:

- SeaweedFS stopped while jobs upload, restarted 3 s later: each job retries as transient
  ``upload_failed`` and succeeds, or fails with that code after its attempts; none is lost;
- redis-server killed with SIGKILL while the worker works through a backlog, restarted from its AOF:
  the worker survives and every job ends terminal exactly once;
- SeaweedFS paused (SIGSTOP) so an upload hangs, the job canceled meanwhile, then resumed: the job ends
  ``canceled`` and the objects its upload stored are deleted.

The worker takes no denoising checkpoints: a checkpoint is read from the store when denoising starts,
and the paused store must first be met by the upload.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import Stage, Status
from foundation.settings import settings_env
from tests.fixtures.redis_server import RedisServer, start_redis
from tests.integration.worker_harness import WorkerProcess, make_record, write_test_catalog
from tests.reliability.support import TERMINAL, RestartableSeaweed, assert_invariants, s3_store_env, worker_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def infra(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[dict[str, Any]]:
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue
    from foundation.stores.factory import open_store

    tmp = tmp_path_factory.mktemp("infra-faults")
    redis = start_redis(tmp / "redis", "--appendonly", "yes", "--appendfsync", "always")
    weed = RestartableSeaweed(tmp / "weed")
    worker: WorkerProcess | None = None
    try:
        server = weed.start()
        catalog = write_test_catalog(tmp / "catalog.yaml")
        store_env = {
            **s3_store_env(server),
            **settings_env({"queue": {"max_attempts": 4}, "worker": {"checkpoints": False}}),
        }
        env = worker_env(tmp, redis.url, tiny_models_dir, catalog, **store_env)
        worker = WorkerProcess(env, tmp / "worker.log").start()
        queue = open_queue(QueueSettings(backend="redis", redis_url=redis.url, lease_ttl_s=2, max_attempts=4))
        store = open_store(server.store_settings(), data_dir=tmp)
        worker.wait_ready()
        yield {
            "redis": redis,
            "weed": weed,
            "worker": worker,
            "queue": queue,
            "store": store,
            "catalog": load_catalog(catalog),
        }
        queue.close()
    finally:
        if worker is not None:
            worker.stop()
        weed.stop()
        redis.stop()


def enqueue_fast(infra: dict[str, Any], n: int) -> list[str]:
    ids = []
    for _ in range(n):
        record = make_record(infra["catalog"], "tiny-wan", variant="fast", resolution="144p", duration_seconds=1)
        infra["queue"].enqueue(record)
        ids.append(record.id)
    return ids


def wait_terminal(infra: dict[str, Any], ids: list[str], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            records = [infra["queue"].get(i) for i in ids]
        except Exception:  # the queue server is restarting
            records = []
        if records and all(r is not None and r.status in TERMINAL for r in records):
            return
        time.sleep(0.2)
    raise AssertionError(f"not all terminal in {timeout_s}s:\n{infra['worker'].log_tail()}")


def test_seaweedfs_stopped_during_uploads_then_restarted_loses_nothing(infra: dict[str, Any]) -> None:
    ids = enqueue_fast(infra, 6)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # stop the store as soon as the worker is encoding/uploading
        first = infra["queue"].get(ids[0])
        if first is not None and (first.stage in (Stage.encoding, Stage.uploading) or first.terminal):
            break
        time.sleep(0.02)
    infra["weed"].stop()
    time.sleep(3.0)
    infra["weed"].start()
    wait_terminal(infra, ids)
    outcomes = assert_invariants(infra["queue"], ids, infra["store"], infra["worker"])
    # An unreachable store is nobody's job error: the job is released (no attempt used) and runs
    # again once the store is back, however long the outage lasted; it never fails for it.
    assert outcomes == {"succeeded": len(ids)}, outcomes
    released = [i for i in ids if "released: backend" in [e.reason for e in infra["queue"].events(i)]]
    assert released, f"no job met the outage: {outcomes}"  # the fault really hit an upload
    assert infra["worker"].metric("genworker_local_faults_total", kind="backend") >= 1


def test_redis_killed_and_restarted_from_aof_during_a_backlog(infra: dict[str, Any]) -> None:
    redis: RedisServer = infra["redis"]
    ids = enqueue_fast(infra, 8)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = [r for r in (infra["queue"].get(i) for i in ids) if r is not None and r.terminal]
        if len(done) >= 2:
            break
        time.sleep(0.05)
    redis.kill()  # SIGKILL: only what the AOF holds survives
    time.sleep(1.0)
    redis.start()
    wait_terminal(infra, ids, timeout_s=120)
    outcomes = assert_invariants(infra["queue"], ids, infra["store"], infra["worker"])
    assert outcomes.get("succeeded", 0) == len(ids), outcomes
    assert infra["worker"].get("/readyz")[0] == 200
    # The worker keeps taking work after the outage.
    more = enqueue_fast(infra, 1)
    wait_terminal(infra, more)
    assert infra["queue"].get(more[0]).status is Status.succeeded  # type: ignore[union-attr]


def test_a_cancel_while_the_upload_hangs_is_honoured(infra: dict[str, Any]) -> None:
    """The cancel arrives after the job entered ``uploading`` (the stage write that would have seen it) and
    before the upload returns: the worker reads the flag again before its finish."""
    queue, weed = infra["queue"], infra["weed"]
    weed.pause()  # nothing touches the store before the upload: the job runs up to it, then hangs there
    try:
        [job_id] = enqueue_fast(infra, 1)
        deadline = time.monotonic() + 60
        while (record := queue.get(job_id)) is not None and record.stage is not Stage.uploading:
            assert not record.terminal and time.monotonic() < deadline, (record, infra["worker"].log_tail())
            time.sleep(0.02)
        queue.cancel(job_id)
    finally:
        weed.resume()
    wait_terminal(infra, [job_id])
    assert assert_invariants(queue, [job_id], infra["store"], infra["worker"]) == {"canceled": 1}
    left = [o.key for o in infra["store"].list_objects(f"generations/{job_id}/")]
    assert left == [], left  # what the upload stored went with the cancel, not at the next sweep

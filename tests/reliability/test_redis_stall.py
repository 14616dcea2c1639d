"""Redis stalls longer than the worker's socket timeout, under a working worker (issue 16, item 2).

A BGSAVE fork or an AOF rewrite on a loaded server, or a slow disk, stops Redis answering for seconds.
The worker's Redis client gives up after ``queue.socket_timeout_s`` (1.5 s here) and the queue
translates that into ``BackendUnavailable``: a transient failure. The job must come out of it
``succeeded`` (on this attempt or a later one), never ``failed`` with ``pipeline_error``, never left
``running``, never succeeded twice.

One ``genworker worker`` process on its own redis-server (debug commands enabled) and the session's
SeaweedFS:

- ``CLIENT PAUSE 3000 ALL`` while the job is denoising: its progress writes, cancel polls and lease
  renewals all time out;
- ``DEBUG SLEEP 3`` (the whole server blocked, sent from a second connection) while the job uploads:
  its ``finish`` times out, and may still be applied once the server wakes up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import GenerationRecord, Stage, Status
from foundation.queue.base import JobQueue
from foundation.settings import settings_env
from tests.fixtures.redis_server import start_redis
from tests.integration.worker_harness import WorkerProcess, make_record, seaweed_env, wait_for, write_test_catalog
from tests.reliability.support import TERMINAL, object_size, worker_env

pytestmark = pytest.mark.slow

SOCKET_TIMEOUT_S = 1.5
STALL_S = 3.0  # twice the socket timeout


@pytest.fixture(scope="module")
def stall(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path, seaweed: Any) -> Iterator[dict[str, Any]]:
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue
    from foundation.stores.factory import open_store

    tmp = tmp_path_factory.mktemp("redis-stall")
    redis = start_redis(tmp / "redis", "--enable-debug-command", "yes")
    worker: WorkerProcess | None = None
    queue: JobQueue | None = None
    try:
        catalog = write_test_catalog(tmp / "catalog.yaml")
        overrides = {
            "queue": {"lease_ttl_s": 6, "socket_timeout_s": SOCKET_TIMEOUT_S},
            "worker": {"hosted_models": ["slow-wan"], "preload": ["slow-wan"]},
        }
        env = {**worker_env(tmp, redis.url, tiny_models_dir, catalog), **settings_env(overrides)}
        worker = WorkerProcess({**env, **seaweed_env(seaweed)}, tmp / "worker.log").start()
        queue = open_queue(QueueSettings(backend="redis", redis_url=redis.url, lease_ttl_s=6))
        store = open_store(seaweed.store_settings(), data_dir=tmp)
        worker.wait_ready()
        yield {"redis": redis, "worker": worker, "queue": queue, "store": store, "catalog": load_catalog(catalog)}
    finally:
        if worker is not None:
            worker.stop()
        if queue is not None:
            queue.close()
        redis.stop()


def enqueue_slow(stall: dict[str, Any], variant: str) -> str:
    record = make_record(stall["catalog"], "slow-wan", variant=variant, resolution="144p", duration_seconds=1)
    stall["queue"].enqueue(record)
    return record.id


def stalled_errors(worker: WorkerProcess, job_id: str) -> list[str]:
    """What the worker logged about this job while Redis did not answer (waiting a moment for the lines:
    the worker writes them from a thread of its own)."""
    worker.job_log(job_id, until="redis unavailable", timeout_s=5)
    return [
        str(line.get("msg"))
        for line in worker.logs()
        if line.get("job_id") == job_id and "redis unavailable" in str(line.get("msg"))
    ]


def assert_survived(stall: dict[str, Any], job_id: str) -> GenerationRecord:
    queue: JobQueue = stall["queue"]
    record, _ = wait_for(queue, job_id, lambda r: r.terminal, timeout_s=60)
    assert record.status is Status.succeeded, (record, stall["worker"].log_tail())
    events = queue.events(job_id)
    assert [e.status for e in events if e.status in TERMINAL] == [Status.succeeded], events
    for artifact in record.artifacts:  # the record points at objects that exist
        assert object_size(stall["store"], artifact.key) == artifact.bytes, artifact.key
    assert stall["worker"].get("/healthz")[0] == 200
    reasons = [e.reason or "" for e in events]
    assert not any("pipeline_error" in r for r in reasons), reasons
    assert sum(r.startswith("succeeded") for r in reasons) == 1, reasons
    return record


def test_a_stall_during_denoising_does_not_fail_the_job(stall: dict[str, Any]) -> None:
    job_id = enqueue_slow(stall, "long")
    wait_for(stall["queue"], job_id, lambda r: r.stage is Stage.denoising and r.progress > 0, timeout_s=60)
    admin = stall["redis"].client()
    try:
        admin.execute_command("CLIENT", "PAUSE", int(STALL_S * 1000), "ALL")
        time.sleep(STALL_S)
    finally:
        admin.close()
    assert_survived(stall, job_id)
    assert stalled_errors(stall["worker"], job_id), stall["worker"].log_tail()  # the stall hit the job


def test_a_stall_during_finish_does_not_fail_the_job(stall: dict[str, Any]) -> None:
    job_id = enqueue_slow(stall, "short")
    wait_for(stall["queue"], job_id, lambda r: r.stage is Stage.uploading or r.terminal, poll_s=0.005)

    admin = stall["redis"].client()  # DEBUG SLEEP blocks the whole server, this connection included
    try:
        admin.execute_command("DEBUG", "SLEEP", STALL_S)
    finally:
        admin.close()
    assert_survived(stall, job_id)
    # The stall began once the record said ``uploading``: the upload (tens of ms) ends inside it, so
    # the finish (or the settle after it) met the stall.
    assert stalled_errors(stall["worker"], job_id), stall["worker"].log_tail()

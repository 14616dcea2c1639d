"""Worker deaths and shutdowns with real processes, Redis and S3: no job is lost, none succeeds twice.

Three worker processes in sequence, each with a 3 s lease:
A is killed with SIGKILL mid-denoise and B finishes its job as attempt 2; B (drain grace 0.5 s) gets
SIGTERM mid-job, releases it and exits 0; C (drain grace 60 s) takes the released job, gets SIGTERM
mid-job, finishes it, leaves the next queued job alone and exits 0.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.worker_harness import (
    WorkerProcess,
    make_record,
    redis_db_url,
    redis_worker_env,
    status_is,
    terminal,
    wait_for,
    write_test_catalog,
)
from worker.core.catalog import load_catalog
from worker.core.contract import GenerationRecord, Stage, Status
from worker.queue.base import JobQueue
from worker.settings import settings_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crash_env(
    tmp_path_factory: pytest.TempPathFactory, redis_server: Any, seaweed: Any, tiny_models_dir: Path
) -> Iterator[dict[str, Any]]:
    from worker.queue.config import QueueSettings
    from worker.queue.factory import open_queue

    redis_url = redis_db_url(redis_server, 3)
    tmp = tmp_path_factory.mktemp("worker-crash")
    catalog_path = write_test_catalog(tmp / "catalog.yaml")
    env = redis_worker_env(
        tmp=tmp,
        catalog_path=catalog_path,
        redis_url=redis_url,
        lease_ttl_s=3,
        tiny_models_dir=tiny_models_dir,
        hosted=["slow-wan"],
        preload=["slow-wan"],
        seaweed=seaweed,
        overrides={"worker": {"reclaim_interval_s": 1}},
    )
    queue = open_queue(QueueSettings(backend="redis", redis_url=redis_url, lease_ttl_s=3))
    workers: list[WorkerProcess] = []
    yield {"env": env, "tmp": tmp, "queue": queue, "catalog": load_catalog(catalog_path), "workers": workers}
    for worker in workers:
        worker.stop()
    queue.close()


def start_worker(crash_env: dict[str, Any], name: str, **section: Any) -> WorkerProcess:
    """A worker on the module's environment; ``section``: fields of its ``worker`` settings section."""
    env = {**crash_env["env"], **settings_env({"worker": section})}
    worker = WorkerProcess(env, crash_env["tmp"] / f"{name}.log").start()
    crash_env["workers"].append(worker)
    return worker.wait_ready()


def enqueue(crash_env: dict[str, Any], variant: str) -> GenerationRecord:
    record = make_record(crash_env["catalog"], "slow-wan", variant=variant)
    crash_env["queue"].enqueue(record)
    return record


def denoising_on(attempt: int) -> Any:
    return lambda r: (
        r.status is Status.running and r.attempt == attempt and r.stage is Stage.denoising and r.progress > 0
    )


def succeeded_events(queue: JobQueue, job_id: str) -> int:
    return sum(1 for e in queue.events(job_id) if e.status is Status.succeeded)


@pytest.fixture(scope="module")
def worker_b(crash_env: dict[str, Any]) -> dict[str, Any]:
    """A dies by SIGKILL mid-job; B (started afterwards) finishes that job as attempt 2."""
    queue: JobQueue = crash_env["queue"]
    worker_a = start_worker(crash_env, "a")
    job = enqueue(crash_env, "long")
    wait_for(queue, job.id, denoising_on(1))
    worker_a.signal(signal.SIGKILL)
    assert worker_a.wait_exit() == -signal.SIGKILL
    worker_b = start_worker(crash_env, "b", drain_grace_s=0.5)
    return {"worker": worker_b, "killed_job": job}


def test_a_job_of_a_killed_worker_is_finished_by_another_worker(
    crash_env: dict[str, Any], worker_b: dict[str, Any]
) -> None:
    queue: JobQueue = crash_env["queue"]
    job = worker_b["killed_job"]
    done, _ = wait_for(queue, job.id, terminal, timeout_s=120)
    assert done.status is Status.succeeded, done.error
    assert done.attempt == 2
    assert all(f"/{job.id}/2-" in a.key for a in done.artifacts)
    statuses = [e.status for e in queue.events(job.id)]
    assert statuses == [Status.queued, Status.running, Status.queued, Status.running, Status.succeeded]


def test_sigterm_past_the_grace_releases_the_job_and_exits_zero(
    crash_env: dict[str, Any], worker_b: dict[str, Any]
) -> None:
    queue: JobQueue = crash_env["queue"]
    worker: WorkerProcess = worker_b["worker"]
    job = enqueue(crash_env, "long")
    wait_for(queue, job.id, denoising_on(1))
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0
    record = queue.get(job.id)
    assert record is not None and record.status is Status.queued  # released for re-delivery, not lost
    assert [e.reason for e in queue.events(job.id)][-1] == "released"
    crash_env["released_job"] = job


def test_sigterm_within_the_grace_finishes_the_job_and_claims_no_more(crash_env: dict[str, Any]) -> None:
    queue: JobQueue = crash_env["queue"]
    released: GenerationRecord = crash_env["released_job"]
    worker = start_worker(crash_env, "c", drain_grace_s=60)
    wait_for(queue, released.id, denoising_on(2))
    waiting = enqueue(crash_env, "short")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout_s=90) == 0
    done = queue.get(released.id)
    assert done is not None and done.status is Status.succeeded, done
    assert succeeded_events(queue, released.id) == 1
    left = queue.get(waiting.id)
    assert left is not None and left.status is Status.queued and left.attempt == 0
    assert status_is(Status.queued)(left)

"""Worker deaths and shutdowns with real processes, Redis and S3: no job is lost, none succeeds twice, and
none starts over (denoising checkpoints, ``pipelines.runtime.resume``; slow-wan checkpoints every 4 steps).

Three worker processes in sequence, each with a 3 s lease:
A is killed with SIGKILL mid-denoise after a checkpoint, and B finishes its job as attempt 2 from that
checkpoint, into an MP4 whose frames are those of an uninterrupted twin job (same prompt and seed); B
(drain grace 0.5 s) gets SIGTERM mid-job, checkpoints, releases it and exits 0; C (drain grace 60 s)
resumes the released job from B's step, gets a preemption notice mid-job (its ``preempt_file`` appears:
not ready at once, drains as on SIGTERM), finishes it (it fits the grace), leaves the next queued job
alone and exits 0. Finished generations leave no checkpoint behind.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import GenerationRecord, Stage, Status
from foundation.queue.base import JobQueue
from foundation.settings import settings_env
from foundation.stores.s3 import S3Store
from tests.integration.worker_harness import (
    WorkerProcess,
    make_record,
    redis_db_url,
    redis_worker_env,
    status_is,
    terminal,
    wait_for,
    wait_until,
    write_test_catalog,
)
from tests.integration.worker_media import decoded_frames, fetch_object
from worker.checkpoints import checkpoint_key

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crash_env(
    tmp_path_factory: pytest.TempPathFactory, redis_server: Any, seaweed: Any, tiny_models_dir: Path
) -> Iterator[dict[str, Any]]:
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue

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
    store = S3Store(seaweed.store_settings())
    yield {
        "env": env,
        "tmp": tmp,
        "queue": queue,
        "store": store,
        "catalog": load_catalog(catalog_path),
        "workers": workers,
    }
    for worker in workers:
        worker.stop()
    queue.close()


def start_worker(crash_env: dict[str, Any], name: str, **section: Any) -> WorkerProcess:
    """A worker on the module's environment; ``section``: fields of its ``worker`` settings section."""
    env = {**crash_env["env"], **settings_env({"worker": section})}
    worker = WorkerProcess(env, crash_env["tmp"] / f"{name}.log").start()
    crash_env["workers"].append(worker)
    return worker.wait_ready()


def enqueue(crash_env: dict[str, Any], variant: str, prompt: str | None = None) -> GenerationRecord:
    record = make_record(crash_env["catalog"], "slow-wan", variant=variant, prompt=prompt)
    crash_env["queue"].enqueue(record)
    return record


def has_checkpoint(crash_env: dict[str, Any], job_id: str) -> bool:
    return bool(crash_env["store"].exists(checkpoint_key(job_id)))


def video_frames(crash_env: dict[str, Any], record: GenerationRecord) -> Any:
    video = next(a for a in record.artifacts if a.content_type == "video/mp4")
    return decoded_frames(fetch_object(crash_env["store"], video.key))


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
    wait_for(queue, job.id, lambda r: denoising_on(1)(r) and has_checkpoint(crash_env, job.id))
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
    # Resumed from A's last checkpoint (a multiple of 4 of the 40 steps), not from step 0 ...
    assert done.resumed_from_step is not None and done.resumed_from_step % 4 == 0, done.resumed_from_step
    # Deleted with the generation's end (right after its record is written, so the test waits a moment).
    wait_until(lambda: not has_checkpoint(crash_env, job.id), "the finished job's checkpoint deleted", timeout_s=10)
    # ... into exactly the video an uninterrupted run of the same prompt and seed gives.
    twin = enqueue(crash_env, "long", prompt=job.input.prompt)
    twin_done, _ = wait_for(queue, twin.id, terminal, timeout_s=120)
    assert twin_done.status is Status.succeeded and twin_done.resumed_from_step is None
    assert (video_frames(crash_env, done) == video_frames(crash_env, twin_done)).all()


def test_sigterm_past_the_grace_releases_the_job_and_exits_zero(
    crash_env: dict[str, Any], worker_b: dict[str, Any]
) -> None:
    queue: JobQueue = crash_env["queue"]
    worker: WorkerProcess = worker_b["worker"]
    job = enqueue(crash_env, "long")
    wait_for(queue, job.id, denoising_on(1))
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0
    exited_s = time.monotonic() - signalled
    record = queue.get(job.id)
    assert record is not None and record.status is Status.queued  # released for re-delivery, not lost
    assert record.attempt == 1 and record.max_attempts == 3  # the release used no attempt of the job
    assert [e.reason for e in queue.events(job.id)][-1] == "released"
    # 35+ s of denoising left cannot fit 0.5 s: checkpointed at the next step rather than lost at the grace.
    assert has_checkpoint(crash_env, job.id)
    stopped = re.search(r"cannot finish within the grace; checkpointed at step (\d+) of 40", worker.log_tail(10**7))
    assert stopped is not None, worker.log_tail()
    crash_env["checkpointed_step"] = int(stopped.group(1))
    assert exited_s < 0.5 + 5.0, exited_s  # the grace, plus the in-flight step and the write
    crash_env["released_job"] = job


def test_a_preemption_notice_within_the_grace_finishes_the_job_and_claims_no_more(crash_env: dict[str, Any]) -> None:
    queue: JobQueue = crash_env["queue"]
    released: GenerationRecord = crash_env["released_job"]
    notice = crash_env["tmp"] / "preempt-notice"  # what a spot-instance notice hook would create
    worker = start_worker(crash_env, "c", drain_grace_s=60, preempt_file=str(notice))
    wait_for(queue, released.id, denoising_on(2))
    # Another process's log, read while it runs: wait for the line rather than assume it is written yet.
    wait_until(lambda: "resumed from a checkpoint" in worker.log_tail(10**7), "the resume's log line", timeout_s=10)
    waiting = enqueue(crash_env, "short")
    notice.touch()
    wait_until(lambda: worker.get("/readyz")[0] == 503, "not ready once the notice is seen", timeout_s=5)
    assert worker.wait_exit(timeout_s=90) == 0
    done = queue.get(released.id)
    assert done is not None and done.status is Status.succeeded, done
    assert done.resumed_from_step == crash_env["checkpointed_step"]  # from B's last step, not from step 0
    assert not has_checkpoint(crash_env, released.id)
    assert succeeded_events(queue, released.id) == 1
    left = queue.get(waiting.id)
    assert left is not None and left.status is Status.queued and left.attempt == 0
    assert status_is(Status.queued)(left)

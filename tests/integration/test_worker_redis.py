"""The worker daemon in distributed mode: a real ``genworker worker`` process, a real redis-server,
real SeaweedFS (S3), real ffmpeg and the tiny diffusers models.

One worker process serves the whole module (starting one costs seconds of imports); each test
enqueues its own jobs, as the API would, and reads records, events, objects and ``/metrics``.
The last test checks that the metrics add up to exactly what the earlier tests did.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import GenerationRecord, Stage, Status
from foundation.core.errors import ErrorCode, public_message
from foundation.queue.base import JobQueue
from tests.integration.worker_harness import (
    WorkerProcess,
    make_record,
    redis_db_url,
    redis_worker_env,
    terminal,
    wait_for,
    write_test_catalog,
)
from tests.integration.worker_media import assert_playable_mp4, fetch_object

HOSTED = ["tiny-wan", "tiny-ltx2", "slow-wan", "faulty-raise", "faulty-oom", "faulty-oom-once", "timeout-wan"]

# Every record this module enqueued, for the metrics reconciliation at the end.
ENQUEUED: list[str] = []


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, redis_server: Any, seaweed: Any, tiny_models_dir: Path
) -> Iterator[dict[str, Any]]:
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue
    from foundation.stores.factory import open_store

    redis_url = redis_db_url(redis_server, 2)
    tmp = tmp_path_factory.mktemp("worker-redis")
    catalog_path = write_test_catalog(tmp / "catalog.yaml")
    env = redis_worker_env(
        tmp=tmp,
        catalog_path=catalog_path,
        redis_url=redis_url,
        lease_ttl_s=5,
        tiny_models_dir=tiny_models_dir,
        hosted=HOSTED,
        preload=["tiny-wan"],
        seaweed=seaweed,
        GENWORKER_TEST_STEP_LOG=str(tmp / "steps.log"),
    )
    worker = WorkerProcess(env, tmp / "worker.log").start()
    queue = open_queue(QueueSettings(backend="redis", redis_url=redis_url, lease_ttl_s=5))
    store = open_store(seaweed.store_settings(), data_dir=tmp)
    try:
        worker.wait_ready()
        yield {"worker": worker, "queue": queue, "store": store, "catalog": load_catalog(catalog_path), "tmp": tmp}
    finally:
        worker.stop()
        queue.close()


def enqueue(stack: dict[str, Any], model: str, **kwargs: Any) -> GenerationRecord:
    record = make_record(stack["catalog"], model, **kwargs)
    stack["queue"].enqueue(record)
    ENQUEUED.append(record.id)
    return record


def test_a_job_goes_queued_running_succeeded_with_a_playable_mp4_with_audio(stack: dict[str, Any]) -> None:
    queue: JobQueue = stack["queue"]
    record = enqueue(stack, "tiny-ltx2", resolution="144p", ratio="16:9", duration_seconds=2, audio=True)
    done, _seen = wait_for(queue, record.id, terminal)
    assert done.status is Status.succeeded, done.error
    assert [e.status for e in queue.events(record.id)] == [Status.queued, Status.running, Status.succeeded]
    assert done.attempt == 1 and done.stage is Stage.done and done.progress == 1.0
    video = next(a for a in done.artifacts if a.kind == "video")
    poster = next(a for a in done.artifacts if a.kind == "poster")
    assert re.fullmatch(rf"generations/{record.id}/1-[0-9a-f]{{12}}/video\.mp4", video.key), video.key
    assert poster.key == video.key.replace("video.mp4", "poster.jpg")  # one claim, one prefix
    assert (video.width, video.height, video.frames, video.duration_seconds) == (256, 144, 16, 2.0)
    data = fetch_object(stack["store"], video.key)
    assert len(data) == video.bytes
    assert_playable_mp4(data, width=256, height=144, frames=16, duration_s=2.0, audio_channels=2)
    assert done.usage is not None
    assert done.usage.output_seconds == 2.0 and done.usage.gpu_seconds > 0
    assert done.price is not None
    assert Decimal(done.price.amount) <= Decimal(done.price_hold.amount)
    assert done.price.amount == done.price_hold.amount  # the full duration was delivered


def test_progress_increases_through_the_stages(stack: dict[str, Any]) -> None:
    queue: JobQueue = stack["queue"]
    record = enqueue(stack, "slow-wan", variant="short")
    done, seen = wait_for(queue, record.id, terminal)
    assert done.status is Status.succeeded, done.error
    stages = [r.stage for r in seen if r.status is Status.running]
    order = [Stage.loading, Stage.denoising, Stage.encoding, Stage.uploading]
    assert [s for s in order if s in stages] == [s for s in dict.fromkeys(stages) if s in order]
    assert Stage.denoising in stages
    denoising = [r.progress for r in seen if r.status is Status.running and r.stage is Stage.denoising]
    assert denoising == sorted(denoising), denoising
    assert len(set(denoising)) >= 3, denoising  # 10 steps of 0.2 s at <= 4 writes/s
    video = next(a for a in done.artifacts if a.kind == "video")
    data = fetch_object(stack["store"], video.key)
    assert_playable_mp4(data, width=256, height=144, frames=4, duration_s=1.0, audio_channels=None)


def test_cancel_mid_denoise_ends_canceled_within_one_step(stack: dict[str, Any]) -> None:
    queue: JobQueue = stack["queue"]
    record = enqueue(stack, "slow-wan", variant="long")
    wait_for(queue, record.id, lambda r: r.stage is Stage.denoising and r.progress > 0)
    requested_at = time.time()
    queue.cancel(record.id)
    done, _ = wait_for(queue, record.id, terminal)
    assert done.status is Status.canceled
    assert done.artifacts == [] and done.error is None
    steps = _steps_logged(stack["tmp"] / "steps.log", record.input.prompt)
    after = [step for step, at in steps if at > requested_at]
    assert len(after) <= 1, f"steps completed after the cancel request: {after}"
    assert len(steps) < 40  # it stopped mid-denoise


def _steps_logged(path: Path, prompt: str) -> list[tuple[int, float]]:
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    return [(int(step), float(at)) for p, step, at in rows if p == prompt]


def test_a_pipeline_that_raises_fails_with_a_code_and_the_worker_takes_the_next_job(stack: dict[str, Any]) -> None:
    queue: JobQueue = stack["queue"]
    bad = enqueue(stack, "faulty-raise")
    good = enqueue(stack, "tiny-wan", resolution="144p", duration_seconds=1)
    failed, _ = wait_for(queue, bad.id, terminal)
    assert failed.status is Status.failed
    assert failed.error is not None and failed.error.code is ErrorCode.pipeline_error
    assert failed.error.message == public_message(ErrorCode.pipeline_error)  # details: the worker's log
    logged = stack["worker"].job_log(failed.id, until="synthetic pipeline failure")
    assert "synthetic pipeline failure" in logged, logged
    assert failed.attempt == 1  # model errors are terminal, not retried
    ok, _ = wait_for(queue, good.id, terminal)
    assert ok.status is Status.succeeded, ok.error


def test_out_of_memory_is_retried_once_in_process_then_fails_and_the_worker_survives(stack: dict[str, Any]) -> None:
    queue: JobQueue = stack["queue"]
    worker: WorkerProcess = stack["worker"]
    retries_before = worker.metric("genworker_job_retries_total", code="out_of_memory")
    always = enqueue(stack, "faulty-oom")
    once = enqueue(stack, "faulty-oom-once")
    failed, _ = wait_for(queue, always.id, terminal)
    assert failed.status is Status.failed
    assert failed.error is not None and failed.error.code is ErrorCode.out_of_memory
    assert failed.attempt == 1  # not sent around the queue again
    recovered, _ = wait_for(queue, once.id, terminal)
    assert recovered.status is Status.succeeded, recovered.error
    assert worker.metric("genworker_job_retries_total", code="out_of_memory") == retries_before + 2
    assert worker.get("/healthz")[0] == 200


def test_a_job_past_its_time_limit_fails_with_timeout(stack: dict[str, Any]) -> None:
    record = enqueue(stack, "timeout-wan")
    done, _ = wait_for(stack["queue"], record.id, terminal)
    assert done.status is Status.failed
    assert done.error is not None and done.error.code is ErrorCode.timeout


def test_a_payload_the_catalog_refuses_fails_with_invalid_payload(stack: dict[str, Any]) -> None:
    # The API would have refused it; a record written by an older API or by hand reaches the worker.
    record = make_record(stack["catalog"], "tiny-wan")
    record = record.model_copy(update={"parameters": record.parameters.model_copy(update={"resolution": "1080p"})})
    stack["queue"].enqueue(record)
    ENQUEUED.append(record.id)
    done, _ = wait_for(stack["queue"], record.id, terminal)
    assert done.status is Status.failed
    assert done.error is not None and done.error.code is ErrorCode.invalid_payload
    logged = stack["worker"].job_log(record.id, until="resolution")
    assert "resolution" in logged, logged


def test_heartbeat_logs_and_metrics_add_up(stack: dict[str, Any]) -> None:
    queue: JobQueue = stack["queue"]
    worker: WorkerProcess = stack["worker"]
    records = [queue.get(job_id) for job_id in ENQUEUED]
    assert all(r is not None and r.terminal for r in records)
    outcomes = Counter((r.model, r.status.value, r.error.code.value if r.error else "") for r in records if r)
    for (model, status, code), count in outcomes.items():
        assert worker.metric("genworker_jobs_total", model=model, status=status, code=code) == count
    assert worker.metric("genworker_jobs_in_flight") == 0
    succeeded = sum(n for (_m, status, _c), n in outcomes.items() if status == "succeeded")
    uploads = sum(
        worker.metric("genworker_stage_seconds_count", model=m, stage="uploading")
        for m in {r.model for r in records if r}
    )
    assert uploads == succeeded
    decodes = sum(
        worker.metric("genworker_stage_seconds_count", model=m, stage="decoding")
        for m in {r.model for r in records if r}
    )
    assert decodes >= succeeded  # every succeeded job decoded (a failed one may have decoded too)
    # Every succeeded job of a diffusers adapter (the test-only wrappers expose no pipeline): its denoising
    # FLOPs counted and its TFLOP/s observed; no MFU on a CPU.
    tiny = [r for r in records if r and r.status is Status.succeeded and r.model.startswith("tiny-")]
    models = {r.model for r in tiny}
    assert tiny and sum(worker.metric("genworker_denoise_tflops_count", model=m) for m in models) == len(tiny)
    assert all(worker.metric("genworker_denoise_flops_total", model=m) > 0 for m in models)
    assert worker.metric("genworker_denoise_mfu_count") == 0
    assert worker.metric("genworker_model_load_seconds_count", model="tiny-wan") >= 1
    assert worker.metric("genworker_queue_depth", model="tiny-wan") == 0
    assert worker.get("/healthz")[0] == 200 and worker.get("/readyz")[0] == 200
    beats = [b for b in queue.live_workers() if set(b.hosted_models) == set(HOSTED)]
    assert len(beats) == 1 and beats[0].ready
    lines = worker.logs()
    stage_lines = [line for line in lines if line.get("job_id") == ENQUEUED[0] and "elapsed_ms" in line]
    assert {line["stage"] for line in stage_lines} >= {"loading", "denoising", "decoding", "encoding", "uploading"}
    log_text = worker.log_path.read_text(encoding="utf-8")
    for record in records:
        assert record is not None and record.input.prompt not in log_text  # prompts are never logged

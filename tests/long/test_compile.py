"""Regional compile without compiles inside jobs (``make test-long``: inductor on this CPU takes minutes).

A real ``genworker worker`` hosts and preloads compiled tiny models: tiny-wan (TaylorSeer, a LoRA), tiny-wan-a14b
(two experts, TaylorSeer on both, a LoRA per expert) and tiny-wan-i2v-a14b (image-to-video, two experts, a LoRA per
expert). It warms them before it reports ready (``worker.context.preload``, ``pipelines.runtime.compile``), then runs
a job of every variant of every mode they host, at sizes the warm-up did not use, every offered resolution, ratio
and duration among them: the worker's ``genworker_compiles_in_jobs_total`` stays 0, while a compiled model it hosts
without preloading (so without a warm-up) counts the compiles of its first job. (Before the warm-up covered every
graph kind, the first LoRA job compiled, the first image job compiled and a cached job failed.) The short
check, in make test, that the plan runs every graph kind and expert without compiling is
tests/pipelines/test_warmup_plan.py.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from foundation.core.catalog import Catalog, load_catalog
from foundation.core.contract import GenerationRecord, RecordInput, RecordParameters, StoredImage, parse_create_request
from foundation.core.resolve import resolve
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.settings import settings_env
from foundation.stores.base import ArtifactStore
from foundation.stores.config import StoreSettings
from foundation.stores.factory import open_store
from tests.integration.worker_harness import WorkerProcess, terminal, wait_for, wait_until
from tests.pipelines.family_checks import offered_shapes
from tests.pipelines.i2v_support import pattern

pytestmark = pytest.mark.slow

MODELS = ["tiny-wan", "tiny-wan-a14b", "tiny-wan-i2v-a14b"]
# Hosted and compiled but not preloaded, so never warmed: its first job compiles, which shows the metric counts.
UNWARMED = "tiny-skyreels-v2"
# The warm-up compiles on 2 busy cores for minutes before the worker is ready.
WARM_UP_TIMEOUT_S = 1500.0


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("compile")
    data_dir = tmp / "data"
    data_dir.mkdir()
    settings = {
        "data_dir": str(data_dir),
        "queue": {"backend": "sqlite"},
        "models": {
            "tiny_models_dir": str(tiny_models_dir),
            "cache_budget_gb": 4.0,  # every model stays resident: a warmed model evicted and reloaded is not warmed
            "profile_overrides": {model: {"compile": True} for model in [*MODELS, UNWARMED]},
        },
        "worker": {"hosted_models": [*MODELS, UNWARMED], "preload": MODELS},
        "encoder": {"preset": "ultrafast"},
    }
    queue = open_queue(QueueSettings(backend="sqlite", sqlite_path=str(data_dir / "queue.db")))
    store = open_store(StoreSettings(), data_dir=data_dir)
    worker = WorkerProcess(settings_env(settings), tmp / "worker.log").start()
    try:
        yield {"worker": worker, "queue": queue, "store": store, "catalog": load_catalog(), "tmp": tmp}
    finally:
        worker.stop()
        queue.close()


def _jobs(catalog: Catalog) -> list[tuple[str, str, str, tuple[str, str, int]]]:
    """(model, mode, variant, shape): every hosted variant once; shapes taken in turn from ``offered_shapes`` from
    its second on (the first, the smallest ratio-and-duration corner, is a warm-up shape), so each model's jobs
    cover every resolution, ratio and duration it offers."""
    jobs = []
    for model in MODELS:
        spec = catalog.models[model]
        shapes = offered_shapes(spec)[1:] + offered_shapes(spec)[:1]
        variants = [(mode, name) for mode, modes in spec.modes.items() for name in modes.variants]
        for i in range(max(len(variants), len(shapes))):
            mode, name = variants[i % len(variants)]
            jobs.append((model, mode, name, shapes[i % len(shapes)]))
    return jobs


def _enqueue(env: dict[str, Any], model: str, mode: str, variant: str, shape: tuple[str, str, int]) -> str:
    resolution, ratio, seconds = shape
    parameters = {"seed": 5, "resolution": resolution, "ratio": ratio, "duration_seconds": seconds}
    request = parse_create_request(
        {"model": model, "mode": mode, "variant": variant, "parameters": parameters, "input": {"prompt": "a kite"}}
    )
    job_id = f"gen_{uuid.uuid4().hex}"
    image = _stored_image(env["store"], job_id, env["tmp"]) if mode == "image_to_video" else None
    _job, hold = resolve(request, env["catalog"], image=image)
    record_input = request.input.model_dump() | ({"image": image.model_dump()} if image else {})
    env["queue"].enqueue(
        GenerationRecord(
            id=job_id,
            model=model,
            mode=mode,
            variant=variant,
            parameters=RecordParameters.model_validate(request.parameters.model_dump()),
            input=RecordInput.model_validate(record_input),
            price_hold=hold,
        )
    )
    return job_id


def _stored_image(store: ArtifactStore, job_id: str, tmp: Path) -> StoredImage:
    """A 3:2 photo-like image under the job's prefix, as the API stores it at create (its aspect, not the job's)."""
    buffer = io.BytesIO()
    pattern(4).save(buffer, format="PNG")
    data = buffer.getvalue()
    source = tmp / f"{job_id}.png"
    source.write_bytes(data)
    key = f"generations/{job_id}/input/image.png"
    store.put_file(key, source, content_type="image/png")
    with Image.open(io.BytesIO(data)) as opened:
        width, height = opened.size
    digest = hashlib.sha256(data).hexdigest()
    return StoredImage(key=key, content_type="image/png", bytes=len(data), sha256=digest, width=width, height=height)


@pytest.mark.timeout(WARM_UP_TIMEOUT_S + 600)
def test_after_the_warm_up_no_job_of_any_hosted_variant_compiles(env: dict[str, Any]) -> None:
    worker: WorkerProcess = env["worker"].wait_ready(timeout_s=WARM_UP_TIMEOUT_S)
    warmed = {e["model"]: e for e in worker.logs() if e.get("msg") == "compile warm-up done"}
    assert set(warmed) == set(MODELS), worker.log_tail()
    assert sum(e["graphs"] for e in warmed.values()) > 0  # compiled (not fallen back to eager: that logs 0)
    assert not [e for e in worker.logs() if str(e.get("msg", "")).startswith("compile failed")], worker.log_tail()
    jobs = {_enqueue(env, *job): job for job in _jobs(env["catalog"])}
    done = {job_id: wait_for(env["queue"], job_id, terminal, timeout_s=600)[0] for job_id in jobs}
    failed = [(jobs[i], r.status, r.error) for i, r in done.items() if r.status.value != "succeeded"]
    assert not failed, failed
    # The jobs count on /metrics (the succeeded count lands just after the record's finish), not one compile.
    wait_until(lambda: worker.metric("genworker_jobs_total", status="succeeded") == len(jobs), "the jobs' metric")
    compiled = {model: worker.metric("genworker_compiles_in_jobs_total", model=model) for model in MODELS}
    assert compiled == dict.fromkeys(MODELS, 0.0), compiled
    # The same metric on a compiled model that was not warmed: its first job compiles, and it is counted.
    unwarmed = _enqueue(env, UNWARMED, "text_to_video", "fast", ("144p", "16:9", 1))
    assert wait_for(env["queue"], unwarmed, terminal, timeout_s=600)[0].status.value == "succeeded"
    assert worker.metric("genworker_compiles_in_jobs_total", model=UNWARMED) > 0

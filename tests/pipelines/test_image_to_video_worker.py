"""The worker's side of image_to_video, on a real SQLite queue, a real local artifact store and the tiny models:
the stored input image is read by key, checked against the sha256 the API recorded, fitted and handed to the
adapter; bytes that do not match (or a missing object) fail the job at once with ``input_image_corrupt``."""

from __future__ import annotations

import hashlib
import io
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from foundation.core.catalog import Catalog
from foundation.core.contract import (
    GenerationRecord,
    RecordInput,
    RecordParameters,
    Status,
    StoredImage,
    parse_create_request,
)
from foundation.core.errors import ErrorCode, JobError
from foundation.core.resolve import resolve
from foundation.queue.sqlite.backend import SqliteQueue
from foundation.stores.local import LocalStore
from pipelines.runtime.cache import ModelCache
from tests.pipelines.helpers import frames_of
from tests.pipelines.i2v_support import pattern, psnr, wan_round_trip
from worker.attempt import Settler
from worker.faults import LocalFaults
from worker.input_image import fit_image, load_input_image
from worker.lease import LeaseKeeper
from worker.metrics import WorkerMetrics
from worker.runner import JobRunner

MODEL = "tiny-wan-ti2v"


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[SqliteQueue]:
    q = SqliteQueue(tmp_path / "queue.db", lease_ttl_s=30)
    yield q
    q.close()


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "artifacts", b"s" * 32, "http://127.0.0.1:1", 60)


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def stored_image(store: LocalStore, job_id: str, data: bytes, *, sha256: str | None = None) -> StoredImage:
    """The image under the job's prefix, as the API stores it at create, with its recorded facts."""
    key = f"generations/{job_id}/input/image.png"
    source = store.root.parent / f"{job_id}.png"
    source.write_bytes(data)
    store.put_file(key, source, content_type="image/png")
    with Image.open(io.BytesIO(data)) as opened:
        width, height = opened.size
    digest = sha256 or hashlib.sha256(data).hexdigest()
    return StoredImage(key=key, content_type="image/png", bytes=len(data), sha256=digest, width=width, height=height)


def image_record(catalog: Catalog, store: LocalStore, data: bytes, *, sha256: str | None = None) -> GenerationRecord:
    body = {
        "model": MODEL,
        "mode": "image_to_video",
        "variant": "fast",
        "parameters": {"seed": 7, "resolution": "144p", "ratio": "16:9", "duration_seconds": 1},
        "input": {"prompt": "a lighthouse at dusk"},
    }
    request = parse_create_request(body)
    _job, hold = resolve(request, catalog)
    job_id = f"gen_{uuid.uuid4().hex}"
    stored = stored_image(store, job_id, data, sha256=sha256)
    return GenerationRecord(
        id=job_id,
        model=MODEL,
        mode=request.mode,
        variant=request.variant,
        parameters=RecordParameters.model_validate(request.parameters.model_dump()),
        input=RecordInput.model_validate({**request.input.model_dump(), "image": stored.model_dump()}),
        price_hold=hold,
    )


def make_runner(
    catalog: Catalog, queue: SqliteQueue, store: LocalStore, cache: ModelCache, tmp_path: Path
) -> tuple[JobRunner, Settler]:
    metrics = WorkerMetrics()
    faults = LocalFaults(metrics, [MODEL], worker_id="w1", base_s=1, cap_s=1, load_failure_workers=3)
    leases = LeaseKeeper(queue, 30, hang_margin_s=60, on_hang=lambda reason: None)
    settler = Settler(queue, leases, metrics, faults, backoff_base_s=1, backoff_cap_s=1)
    runner = JobRunner(
        catalog=catalog,
        queue=queue,
        cache=cache,
        leases=leases,
        settler=settler,
        metrics=metrics,
        faults=faults,
        stop_now=threading.Event(),
        progress_interval_s=1,
        work_root=tmp_path,
        store=store,
    )
    return runner, settler


def test_an_image_whose_bytes_do_not_match_the_recorded_sha256_fails_the_job_at_once(
    catalog: Catalog, queue: SqliteQueue, store: LocalStore, tmp_path: Path
) -> None:
    data = png_bytes(pattern(1))
    record = image_record(catalog, store, data, sha256=hashlib.sha256(b"another image").hexdigest())
    queue.enqueue(record)
    claim = queue.claim("w1", [MODEL])
    assert claim is not None
    # No model is ever loaded: the check comes first (an object cache would fail the test if touched).
    runner, _settler = make_runner(catalog, queue, store, object(), tmp_path)  # type: ignore[arg-type]
    assert runner.run_on_gpu(runner.begin(claim)) is None  # settled, not handed over
    failed = queue.get(record.id)
    assert failed is not None and failed.status is Status.failed
    assert failed.error is not None and failed.error.code is ErrorCode.input_image_corrupt
    assert failed.attempt == 1 and queue.claim("w1", [MODEL]) is None  # terminal: no retry storm


def test_an_image_to_video_record_without_a_stored_image_fails_before_any_model_loads(
    catalog: Catalog, queue: SqliteQueue, store: LocalStore, tmp_path: Path
) -> None:
    record = image_record(catalog, store, png_bytes(pattern(1)))
    queue.enqueue(record.model_copy(update={"input": RecordInput(prompt=record.input.prompt)}))
    claim = queue.claim("w1", [MODEL])
    assert claim is not None
    runner, _settler = make_runner(catalog, queue, store, object(), tmp_path)  # type: ignore[arg-type]
    assert runner.run_on_gpu(runner.begin(claim)) is None
    failed = queue.get(record.id)
    assert failed is not None and failed.status is Status.failed
    assert failed.error is not None and failed.error.code is ErrorCode.invalid_payload


@pytest.mark.parametrize("damage", ["missing", "truncated", "swapped"])
def test_a_missing_truncated_or_swapped_stored_image_is_refused_with_its_code(
    damage: str, catalog: Catalog, store: LocalStore
) -> None:
    data = png_bytes(pattern(1))
    record = image_record(catalog, store, data)
    stored = record.input.image
    assert stored is not None
    path = store.path_for(stored.key)
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(data[:-10])
    else:  # same size, other bytes
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    job, _hold = resolve(parse_create_request(_body(record)), catalog, image=stored)
    with pytest.raises(JobError) as refused:
        load_input_image(store, job)
    assert refused.value.code is ErrorCode.input_image_corrupt


def _body(record: GenerationRecord) -> dict[str, object]:
    return {
        "model": record.model,
        "mode": record.mode,
        "variant": record.variant,
        "parameters": record.parameters.model_dump(exclude_none=True),
        "input": {"prompt": record.input.prompt},
    }


def test_fitting_crops_to_the_target_aspect_around_the_center_then_resizes() -> None:
    # A 400x200 image: left quarter red, middle half green, right quarter blue. A 1:1 target keeps the middle.
    pixels = np.zeros((200, 400, 3), dtype=np.uint8)
    pixels[:, :100, 0] = 255
    pixels[:, 100:300, 1] = 255
    pixels[:, 300:, 2] = 255
    square = np.asarray(fit_image(Image.fromarray(pixels), 64, 64))
    assert square.shape == (64, 64, 3)
    assert square[:, :, 1].min() >= 250 and square[:, :, (0, 2)].max() <= 5
    tall = fit_image(Image.fromarray(pixels), 32, 64)  # 1:2 from 2:1: the center 100x200 strip
    assert tall.size == (32, 64) and np.asarray(tall)[:, :, 1].min() >= 250


def _banded(width: int, height: int, band: int) -> Image.Image:
    """Gray, with red bands along the top and bottom ``band`` rows: what a crop to a wider ratio cuts away."""
    pixels = np.full((height, width, 3), 128, np.uint8)
    pixels[:band] = pixels[-band:] = (255, 0, 0)
    return Image.fromarray(pixels)


@pytest.mark.parametrize(("model", "generated"), [("tiny-wan-i2v", (208, 160)), ("tiny-wan-ti2v", (192, 160))])
def test_the_model_gets_the_whole_image_at_its_aspect_whatever_ratio_is_asked(
    catalog: Catalog, store: LocalStore, model: str, generated: tuple[int, int]
) -> None:
    """A 4:3 image for a 16:9 video: the generation follows the image (Wan I2V's max_area, TI2V's
    best_output_size), so the bands a 16:9 crop would cut (45 of 360 rows each side) reach the model; the video
    is cropped to 16:9 afterwards, by the encoder."""
    data = png_bytes(_banded(480, 360, band=40))
    stored = stored_image(store, f"gen_{uuid.uuid4().hex}", data)
    body = {
        "model": model,
        "mode": "image_to_video",
        "variant": "fast",
        "parameters": {"seed": 7, "resolution": "144p", "ratio": "16:9", "duration_seconds": 1},
        "input": {"prompt": "a lighthouse at dusk"},
    }
    job, _hold = resolve(parse_create_request(body), catalog, image=stored)
    assert (job.width, job.height) == (256, 144)  # the video: the asked offered size
    assert (job.gen_width, job.gen_height) == generated  # the image's 4:3 within a stride, not 16:9
    fitted = np.asarray(load_input_image(store, job))
    assert fitted.shape == (generated[1], generated[0], 3)
    band = round(40 * generated[1] / 360)  # the image's full height is kept: the bands scale with it
    red = (fitted[..., 0] > 200) & (fitted[..., 1] < 60)
    assert red[: band - 2].all() and red[-(band - 2) :].all()
    assert not red[band + 2 : -(band + 2)].any()


def test_the_worker_reads_checks_fits_and_hands_the_image_to_the_model(
    catalog: Catalog, queue: SqliteQueue, store: LocalStore, model_cache: ModelCache, tmp_path: Path
) -> None:
    source = pattern(1, width=480, height=360)  # 4:3, for a 16:9 video
    record = image_record(catalog, store, png_bytes(source))
    queue.enqueue(record)
    claim = queue.claim("w1", [MODEL])
    assert claim is not None
    runner, settler = make_runner(catalog, queue, store, model_cache, tmp_path)
    attempt = runner.begin(claim)
    handoff = runner.run_on_gpu(attempt)
    try:
        assert handoff is not None, queue.get(record.id)
        job = handoff.rendered.job
        assert job.image == record.input.image
        assert (job.gen_width, job.gen_height) == (192, 160)  # the image's 4:3 (best_output_size), not 16:9
        frames = frames_of(handoff.rendered.media)
        assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3)
        pipe = model_cache.get(catalog.models[MODEL]).pipe  # type: ignore[attr-defined]
        expected = wan_round_trip(pipe, fit_image(source, job.gen_width, job.gen_height))
        assert psnr(frames[0], expected) >= 50.0
    finally:
        settler.close(attempt)

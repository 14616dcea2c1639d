"""image_to_video end to end in both layouts: embedded (SQLite queue, local artifact store) with the image as a
``data:`` URI, and distributed (Redis queue, S3 store on SeaweedFS) with the image fetched from a loopback HTTP
server (allowed by the operator setting). Create through the HTTP API, one worker pass (runner and
post-processing over the same queue and store, on the tiny Wan 2.2 TI2V model), then download the MP4 as a
client does and check its size, frame count and first frame.

The first frame is compared with what a perfect image-as-frame-0 model gives through the tiny model's own VAE
(decode(encode(fitted image)), cropped to the asked ratio and scaled to the asked size), within H.264 error. The
image is 4:3 and the video 16:9: the model generates at the image's aspect, as upstream (it sees the whole image),
and the video is cropped afterwards. That another image would score
lower is shown before the codec, in tests/pipelines/test_image_to_video.py: the tiny random VAE maps
different images to round trips closer together than the codec's error. Compared on luma (see MP4_MIN_DB).
"""

from __future__ import annotations

import base64
import hashlib
import io
import threading
from collections.abc import Iterator
from pathlib import Path

import av
import httpx
import numpy as np
import pytest
from PIL import Image

from foundation.core.contract import GenerationRecord, Status, parse_create_request
from foundation.core.resolve import ResolvedJob, resolve
from pipelines.runtime.cache import ModelCache
from tests.e2e.conftest import Stack, add_keys, start_stack
from tests.e2e.test_image_input import fleet_stack  # noqa: F401  # the distributed stack, as a fixture here
from tests.fixtures.image_server import Route, serve_images
from tests.pipelines.i2v_support import pattern, psnr, wan_round_trip
from worker.attempt import Settler
from worker.faults import LocalFaults
from worker.input_image import fit_image
from worker.lease import LeaseKeeper
from worker.metrics import WorkerMetrics
from worker.postprocess import PostProcessor
from worker.runner import JobRunner

MODEL = "tiny-wan-ti2v"
# Luma PSNR after H.264: yuv420p halves the chroma resolution, and the tiny VAE's frames carry pixel-level
# colour noise, so colour PSNR mostly measures the subsampling (measured: luma 38.4 dB for the first frame,
# 27.3 dB for the second, generated one).
MP4_MIN_DB = 35.0


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = start_stack(tmp_path / "api", api={"unhosted_models": "accept"})  # the in-test worker hosts the model
    add_keys(s)
    yield s
    s.stop()


def work_one_job(stack: Stack, cache: ModelCache, work_root: Path) -> None:
    """One worker pass over the stack's queue and store: claim, render, encode, upload, finish."""
    metrics = WorkerMetrics()
    faults = LocalFaults(metrics, [MODEL], worker_id="w1", base_s=1, cap_s=1, load_failure_workers=3)
    leases = LeaseKeeper(stack.queue, 30, hang_margin_s=60, on_hang=lambda reason: None)
    settler = Settler(stack.queue, leases, metrics, faults, backoff_base_s=1, backoff_cap_s=1)
    common = {"catalog": stack.catalog, "queue": stack.queue, "settler": settler, "metrics": metrics, "faults": faults}
    runner = JobRunner(
        cache=cache,
        leases=leases,
        stop_now=threading.Event(),
        progress_interval_s=1,
        work_root=work_root,
        store=stack.store,
        **common,  # type: ignore[arg-type]
    )
    post = PostProcessor(store=stack.store, encoder=stack.settings.encoder, **common)  # type: ignore[arg-type]
    claim = stack.queue.claim("w1", [MODEL])
    assert claim is not None
    handoff = runner.run_on_gpu(runner.begin(claim))
    assert handoff is not None, stack.queue.get(claim.job_id)
    post.run(handoff)


@pytest.mark.parametrize("layout", ["embedded, data URI", "distributed, loopback URL"])
def test_the_input_image_becomes_the_first_frame_of_the_mp4(
    layout: str, request: pytest.FixtureRequest, model_cache: ModelCache, tmp_path: Path
) -> None:
    source = pattern(1, width=480, height=360)  # 4:3, for a 16:9 video: generated at 4:3, cropped after
    buffer = io.BytesIO()
    source.save(buffer, format="PNG")
    png = buffer.getvalue()
    with serve_images({"/source.png": Route(png, headers={"Content-Type": "image/png"})}) as images:
        if layout.startswith("embedded"):
            stack: Stack = request.getfixturevalue("stack")
            image = {"image": "data:image/png;base64," + base64.b64encode(png).decode()}
        else:
            stack = request.getfixturevalue("fleet_stack")
            image = {"image_url": images.url("/source.png")}
        check_first_frame(stack, model_cache, tmp_path, source, png, image)
        assert images.hits == ([] if "image" in image else ["/source.png"])  # fetched once, at create


def check_first_frame(
    stack: Stack, model_cache: ModelCache, tmp_path: Path, source: Image.Image, png: bytes, image: dict[str, str]
) -> None:
    body = {
        "model": MODEL,
        "mode": "image_to_video",
        "variant": "fast",
        "parameters": {"resolution": "144p", "ratio": "16:9", "duration_seconds": 1, "seed": 3},
        "input": {"prompt": "the scene comes alive", **image},
    }
    with stack.client("alpha") as c:
        created = c.post("/v1/generations", json=body, headers={"Idempotency-Key": "i2v-1"})
        assert created.status_code == 202, created.text
        gid = created.json()["id"]
        record = stack.queue.get(gid)
        assert record is not None and record.input.image is not None
        assert record.input.image.sha256 == hashlib.sha256(png).hexdigest()
        assert (record.input.image.width, record.input.image.height) == (480, 360)
        assert stack.store.exists(record.input.image.key)  # stored at create, under the generation

        work_one_job(stack, model_cache, tmp_path)

        final = c.get(f"/v1/generations/{gid}").json()
    assert final["status"] == Status.succeeded.value, final.get("error")
    video = next(a for a in final["artifacts"] if a["kind"] == "video")
    mp4 = tmp_path / "video.mp4"
    mp4.write_bytes(httpx.get(video["download_url"], timeout=30).content)
    with av.open(str(mp4)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]
    assert (video["width"], video["height"]) == (256, 144)
    assert len(frames) == video["frames"] == 4  # 1 s at the tiny model's 4 fps
    assert frames[0].shape == (144, 256, 3)
    # The model generated at the image's 4:3 (192x160: best_output_size within 256x128's pixels, as TI2V-5B), so it
    # saw the whole image; the encoder cut the centred 16:9 window (192x108) and scaled it to the asked 256x144.
    # A perfect model's first frame: the round trip at the generation size, through that same window and scale.
    job = record_job(stack, record)
    assert (job.gen_width, job.gen_height) == (192, 160)
    pipe = model_cache.get(stack.catalog.models[MODEL]).pipe  # type: ignore[attr-defined]
    window = wan_round_trip(pipe, fit_image(source, 192, 160))[26:134]
    expected = np.asarray(Image.fromarray(window).resize((256, 144), Image.Resampling.LANCZOS))
    assert psnr(luma(frames[0]), luma(expected)) >= MP4_MIN_DB
    assert psnr(luma(frames[1]), luma(expected)) < MP4_MIN_DB  # a generated frame does not pass for the image


def record_job(stack: Stack, record: GenerationRecord) -> ResolvedJob:
    """The job the worker ran for ``record`` (resolved as it resolves a claim, with the stored image)."""
    body = {
        "model": record.model,
        "mode": record.mode,
        "variant": record.variant,
        "parameters": record.parameters.model_dump(exclude_none=True),
        "input": {"prompt": record.input.prompt},
    }
    return resolve(parse_create_request(body), stack.catalog, image=record.input.image)[0]


def luma(rgb: np.ndarray) -> np.ndarray:
    """BT.601 luma of an RGB uint8 image."""
    return (rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])).round().clip(0, 255).astype(np.uint8)

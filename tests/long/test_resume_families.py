"""kill -9 mid-denoise for the families beyond Wan 2.1 (``make test-long``; Wan 2.1 is in make test,
tests/integration/test_worker_crash.py): tiny LTX-2 with audio and tiny Wan 2.2 I2V A14B (two experts).

Real worker processes on one SQLite queue and the local store, as ``genworker up`` runs them. Worker A is
killed (SIGKILL) in the LTX-2 job after a checkpoint; B resumes it, runs an uninterrupted twin (same prompt,
seed and parameters), takes the Wan 2.2 job and is killed in it after a checkpoint; C resumes that and runs
its twin. Each resumed job's MP4 decodes to the twin's frames exactly, and LTX-2's audio to the twin's
samples; ``resumed_from_step`` says they did not start over.
"""

from __future__ import annotations

import hashlib
import io
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import yaml
from PIL import Image

from foundation.core.catalog import Catalog, default_catalog_path, load_catalog
from foundation.core.contract import (
    GenerationRecord,
    RecordInput,
    RecordParameters,
    Stage,
    Status,
    StoredImage,
    parse_create_request,
)
from foundation.core.resolve import resolve
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.settings import settings_env
from foundation.stores.base import ArtifactStore
from foundation.stores.config import StoreSettings
from foundation.stores.factory import open_store
from tests.integration.worker_harness import WorkerProcess, terminal, wait_for
from tests.pipelines.i2v_support import pattern
from worker.checkpoints import checkpoint_key

pytestmark = pytest.mark.slow

SLOW = {
    "slow-ltx2": ("tiny-ltx2", "tests.integration.faulty_adapters:SlowLtx2", "text_to_video"),
    "slow-wan-a14b": ("tiny-wan-i2v-a14b", "tests.integration.faulty_adapters:SlowWanI2V", "image_to_video"),
}
STEPS = 16


def _catalog(path: Path) -> Catalog:
    """The tiny models plus slow copies of tiny LTX-2 and Wan 2.2 I2V A14B: 16 steps, a checkpoint every 2."""
    base = yaml.safe_load(default_catalog_path().read_text(encoding="utf-8"))
    tiny = {m["id"]: m for m in base["models"] if m.get("tiny")}
    models = list(tiny.values())
    for model_id, (source, adapter, mode) in SLOW.items():
        entry = dict(tiny[source])
        standard = dict(entry["modes"][mode]["variants"]["standard"])
        entry |= {
            "id": model_id,
            "adapter": adapter,
            "checkpoints": {"every_steps": 2},
            "modes": {mode: {"variants": {"long": {**standard, "steps": STEPS}}}},
        }
        models.append(entry)
    path.write_text(yaml.safe_dump({"models": models}, sort_keys=False), encoding="utf-8")
    return load_catalog(path)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("resume-families")
    catalog_path = tmp / "catalog.yaml"
    catalog = _catalog(catalog_path)
    data_dir = tmp / "data"
    settings = {
        "data_dir": str(data_dir),
        "catalog_path": str(catalog_path),
        "queue": {"backend": "sqlite", "lease_ttl_s": 2},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        "worker": {
            "hosted_models": list(SLOW),
            "preload": list(SLOW),
            "heartbeat_s": 1,
            "reclaim_interval_s": 1,
        },
        "encoder": {"preset": "ultrafast"},
    }
    data_dir.mkdir()
    queue = open_queue(QueueSettings(backend="sqlite", sqlite_path=str(data_dir / "queue.db"), lease_ttl_s=2))
    store = open_store(StoreSettings(), data_dir=data_dir)
    workers: list[WorkerProcess] = []
    yield {
        "env": settings_env(settings),
        "tmp": tmp,
        "queue": queue,
        "store": store,
        "catalog": catalog,
        "workers": workers,
    }
    for worker in workers:
        worker.stop()
    queue.close()


def _start(env: dict[str, Any], name: str) -> WorkerProcess:
    worker = WorkerProcess(env["env"], env["tmp"] / f"{name}.log").start()
    env["workers"].append(worker)
    return worker.wait_ready()


def _record(env: dict[str, Any], model: str, prompt: str) -> GenerationRecord:
    mode = SLOW[model][2]
    params: dict[str, Any] = {"seed": 5, "duration_seconds": 1}
    if model == "slow-ltx2":
        params["audio"] = True
    request = parse_create_request(
        {"model": model, "mode": mode, "variant": "long", "parameters": params, "input": {"prompt": prompt}}
    )
    job_id = f"gen_{uuid.uuid4().hex}"
    image = _stored_image(env["store"], job_id, env["tmp"]) if mode == "image_to_video" else None
    _job, hold = resolve(request, env["catalog"], image=image)
    record_input = request.input.model_dump() | ({"image": image.model_dump()} if image else {})
    record = GenerationRecord(
        id=job_id,
        model=model,
        mode=mode,
        variant="long",
        parameters=RecordParameters.model_validate(request.parameters.model_dump()),
        input=RecordInput.model_validate(record_input),
        price_hold=hold,
    )
    env["queue"].enqueue(record)
    return record


def _stored_image(store: ArtifactStore, job_id: str, tmp: Path) -> StoredImage:
    """The same input image under the job's prefix, as the API stores it at create."""
    buffer = io.BytesIO()
    pattern(2).save(buffer, format="PNG")
    data = buffer.getvalue()
    source = tmp / f"{job_id}.png"
    source.write_bytes(data)
    key = f"generations/{job_id}/input/image.png"
    store.put_file(key, source, content_type="image/png")
    with Image.open(io.BytesIO(data)) as opened:
        width, height = opened.size
    digest = hashlib.sha256(data).hexdigest()
    return StoredImage(key=key, content_type="image/png", bytes=len(data), sha256=digest, width=width, height=height)


def _kill_after_a_checkpoint(env: dict[str, Any], worker: WorkerProcess, record: GenerationRecord) -> None:
    store: ArtifactStore = env["store"]
    wait_for(
        env["queue"],
        record.id,
        lambda r: r.stage is Stage.denoising and r.progress > 0 and store.exists(checkpoint_key(record.id)),
        timeout_s=120,
    )
    worker.signal(signal.SIGKILL)
    assert worker.wait_exit() == -signal.SIGKILL


def _decoded(store: ArtifactStore, record: GenerationRecord) -> tuple[np.ndarray, np.ndarray | None]:
    """The MP4's frames, and its audio samples when it has a track."""
    video = next(a for a in record.artifacts if a.content_type == "video/mp4")
    data = store.read_bytes(video.key, max_bytes=1 << 30)
    assert data is not None
    with av.open(io.BytesIO(data)) as container:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    with av.open(io.BytesIO(data)) as container:
        audio = [f.to_ndarray() for f in container.decode(audio=0)] if container.streams.audio else []
    return frames, (np.concatenate(audio, axis=-1) if audio else None)


def test_ltx2_and_wan22_jobs_of_killed_workers_resume_into_the_uninterrupted_videos(env: dict[str, Any]) -> None:
    queue = env["queue"]
    worker_a = _start(env, "a")
    ltx2 = _record(env, "slow-ltx2", "a drummer on a rooftop at night")
    _kill_after_a_checkpoint(env, worker_a, ltx2)
    worker_b = _start(env, "b")
    ltx2_twin = _record(env, "slow-ltx2", ltx2.input.prompt)
    wan22 = _record(env, "slow-wan-a14b", "a kite over a windy beach")
    _kill_after_a_checkpoint(env, worker_b, wan22)
    _start(env, "c")
    wan22_twin = _record(env, "slow-wan-a14b", wan22.input.prompt)
    done = {r.id: wait_for(queue, r.id, terminal, timeout_s=180)[0] for r in (ltx2, ltx2_twin, wan22, wan22_twin)}
    assert all(r.status is Status.succeeded for r in done.values()), [(r.model, r.error) for r in done.values()]
    for resumed, twin in ((ltx2, ltx2_twin), (wan22, wan22_twin)):
        record, reference = done[resumed.id], done[twin.id]
        assert record.attempt == 2 and record.resumed_from_step is not None, record
        assert record.resumed_from_step % 2 == 0 and 0 < record.resumed_from_step <= STEPS
        assert reference.resumed_from_step is None and reference.attempt == 1
        frames, audio = _decoded(env["store"], record)
        twin_frames, twin_audio = _decoded(env["store"], reference)
        np.testing.assert_array_equal(frames, twin_frames)
        if resumed is ltx2:
            assert audio is not None and twin_audio is not None  # LTX-2's stereo track, resumed too
            np.testing.assert_array_equal(audio, twin_audio)
        assert not env["store"].exists(checkpoint_key(resumed.id))

"""``run_pipeline``, the orchestration the daemon and ``genworker generate`` share: stage order, hooks,
the out-of-memory retry per stage, and the one-shot command's time limit.

The model is a real adapter class loaded through the real ``ModelCache`` (named in the catalog entry,
weights in a temporary directory), so nothing is patched; it records what it was asked to do.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import yaml

from foundation.core.catalog import ModelSpec, default_catalog_path, load_catalog
from foundation.core.contract import CreateRequest, Stage
from foundation.core.errors import ErrorCode, JobCanceled, JobError
from foundation.core.media import Media, StepCallback
from foundation.core.resolve import ResolvedJob, resolve
from foundation.settings import Settings
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.adapter import Adapter, DenoiseStats, Latents
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.flops import DenoiseFlops
from worker.generate import generate_once, prepare_job
from worker.pipeline_run import RunHooks, run_pipeline


@dataclass(frozen=True)
class _FakeLatents(Latents):
    seed: int


class RecordingAdapter(Adapter):
    """Denoises by counting steps and decodes to frames filled with the seed; OOMs on request."""

    options: ClassVar[frozenset[str]] = frozenset()
    events: ClassVar[list[str]] = []
    images: ClassVar[list[tuple[str, object]]] = []  # (call, the image it was given)
    oom_left: ClassVar[dict[str, int]] = {}  # call name -> out-of-memory errors still to raise
    step_sleep_s: ClassVar[float] = 0.0
    stats: ClassVar[DenoiseStats] = DenoiseStats()  # what its denoise reports having measured

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.device = "cpu"
        self.profile = spec.runtime

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> RecordingAdapter:
        cls._event("load")
        return cls(spec)

    def denoise(self, job: ResolvedJob, on_step: StepCallback, **conditioning: Any) -> Latents:
        self._event("denoise")
        if "image" in conditioning:
            self.images.append(("denoise", conditioning["image"]))
        for done in range(1, job.steps + 1):
            time.sleep(self.step_sleep_s)
            on_step(done, job.steps)
        return _FakeLatents(job.seed, stats=self.stats)

    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        self._event("decode")
        assert isinstance(latents, _FakeLatents)
        frames = np.full((job.num_frames, job.gen_height, job.gen_width, 3), latents.seed % 256, np.uint8)
        return Media(
            width=job.gen_width, height=job.gen_height, fps=job.fps, num_frames=job.num_frames, chunks=iter([frames])
        )

    def extend_prompt(self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int, **image: Any) -> str:
        self._event("extend")
        if "image" in image:
            self.images.append(("extend", image["image"]))
        return f"{prompt}, in soft morning light"

    def memory_bytes(self) -> int:
        return 0

    def unload(self) -> None:
        self._event("unload")

    @classmethod
    def _event(cls, name: str) -> None:
        cls.events.append(name)
        if cls.oom_left.get(name, 0) > 0:
            cls.oom_left[name] -= 1
            raise RuntimeError("CUDA error: out of memory (test adapter)")


class Recorder(RunHooks):
    def __init__(self, stop_at: Stage | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.stop_at = stop_at

    @contextmanager
    def stage(self, name: Stage) -> Iterator[None]:
        if name is self.stop_at:
            raise JobCanceled()
        self.calls.append(("enter", name))
        yield
        self.calls.append(("end", name))

    def on_step(self, done: int, total: int) -> None:
        self.calls.append(("step", done, total))

    def model_loaded(self, model_id: str, seconds: float) -> None:
        self.calls.append(("loaded", model_id))

    def out_of_memory(self, stage: Stage) -> None:
        self.calls.append(("oom", stage))

    def compiled(self, model_id: str, graphs: int) -> None:
        self.calls.append(("compiled", model_id, graphs))


@pytest.fixture(autouse=True)
def _fresh_adapter_state() -> Iterator[None]:
    RecordingAdapter.events.clear()
    RecordingAdapter.images.clear()
    RecordingAdapter.oom_left.clear()
    RecordingAdapter.step_sleep_s = 0.0
    RecordingAdapter.stats = DenoiseStats()
    yield


def _catalog_file(tmp_path: Path, **changes: Any) -> Path:
    """The shipped tiny-wan entry served by ``RecordingAdapter``, weights in ``tmp_path``."""
    raw = yaml.safe_load(default_catalog_path().read_text(encoding="utf-8"))
    entry = next(m for m in raw["models"] if m["id"] == "tiny-wan")
    (tmp_path / "weights").mkdir(exist_ok=True)
    entry.update(adapter=f"{__name__}:RecordingAdapter", weights=str(tmp_path / "weights"), tiny=False, **changes)
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}, allow_unicode=True), encoding="utf-8")
    return path


def _request(**params: Any) -> CreateRequest:
    body = {
        "model": "tiny-wan",
        "mode": "text_to_video",
        "variant": "standard",
        "parameters": {"seed": 7, "ratio": "1:1", "duration_seconds": 1, **params},
        "input": {"prompt": "a fox"},
    }
    return CreateRequest.model_validate(body)


def _job(catalog_path: Path, **params: Any) -> tuple[ModelSpec, ResolvedJob]:
    catalog = load_catalog(catalog_path)
    job, _hold = resolve(_request(**params), catalog)
    return catalog.models["tiny-wan"], job


@pytest.fixture
def cache() -> ModelCache:
    return ModelCache(ModelRuntimeSettings(device="cpu"))


def test_stages_run_in_order_with_steps_inside_denoising(tmp_path: Path, cache: ModelCache) -> None:
    spec, job = _job(_catalog_file(tmp_path))
    hooks = Recorder()
    rendered = run_pipeline(cache, spec, job, hooks)
    steps = [("step", i, job.steps) for i in range(1, job.steps + 1)]
    assert hooks.calls == [
        ("enter", Stage.loading),
        ("loaded", "tiny-wan"),
        ("end", Stage.loading),
        ("enter", Stage.denoising),
        *steps,
        ("end", Stage.denoising),
        ("enter", Stage.decoding),
        ("end", Stage.decoding),
    ]
    assert RecordingAdapter.events == ["load", "denoise", "decode"]
    assert rendered.job == job and rendered.extension is None
    assert rendered.gpu_seconds > 0
    frames = np.concatenate(list(rendered.media.chunks))
    assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3) and (frames == 7).all()


def test_what_the_model_measured_comes_from_the_denoise_result(tmp_path: Path, cache: ModelCache) -> None:
    """FLOPs and graphs compiled inside the job are what ``denoise`` returned in ``Latents.stats``: the run reads
    the result, never the adapter's pipeline (``tests/unit/test_worker_reads_no_pipe.py``)."""
    spec, job = _job(_catalog_file(tmp_path))
    hooks = Recorder()
    assert run_pipeline(cache, spec, job, hooks).flops is None  # nothing measured: nothing reported
    assert not [call for call in hooks.calls if call[0] == "compiled"]
    flops = DenoiseFlops()
    RecordingAdapter.stats = DenoiseStats(flops=flops, compiled_graphs=3)
    hooks = Recorder()
    rendered = run_pipeline(cache, spec, job, hooks)
    assert rendered.flops is flops
    assert [call for call in hooks.calls if call[0] == "compiled"] == [("compiled", "tiny-wan", 3)]


def test_prompt_extension_is_its_own_stage_and_the_run_uses_the_new_prompt(tmp_path: Path, cache: ModelCache) -> None:
    spec, job = _job(_catalog_file(tmp_path), prompt_extend=True)
    hooks = Recorder()
    rendered = run_pipeline(cache, spec, job, hooks)
    entered = [call[1] for call in hooks.calls if call[0] == "enter"]
    assert entered == [Stage.loading, Stage.extending_prompt, Stage.denoising, Stage.decoding]
    assert rendered.job.prompt == "a fox, in soft morning light"
    assert rendered.extension is not None and rendered.extension.status == "applied"


def test_the_input_image_reaches_the_prompt_extension_and_the_denoiser(tmp_path: Path, cache: ModelCache) -> None:
    """An image job's rewrite sees its image (LTX-2's I2V enhancement describes it), as the denoiser does; a text
    job's extension gets no ``image`` keyword at all."""
    from PIL import Image

    spec, job = _job(_catalog_file(tmp_path), prompt_extend=True)
    image = Image.new("RGB", (job.gen_width, job.gen_height))
    run_pipeline(cache, spec, job, Recorder(), image=image)
    assert RecordingAdapter.images == [("extend", image), ("denoise", image)]
    RecordingAdapter.images.clear()
    run_pipeline(cache, spec, job, Recorder())
    assert RecordingAdapter.images == []


def test_out_of_memory_in_decode_retries_decode_alone_on_a_reloaded_model(tmp_path: Path, cache: ModelCache) -> None:
    spec, job = _job(_catalog_file(tmp_path))
    RecordingAdapter.oom_left["decode"] = 1
    hooks = Recorder()
    rendered = run_pipeline(cache, spec, job, hooks)
    # The cache was cleared (unload), the model reloaded, and the same latents decoded: no second denoise.
    assert RecordingAdapter.events == ["load", "denoise", "decode", "unload", "load", "decode"]
    assert ("oom", Stage.decoding) in hooks.calls
    assert [call for call in hooks.calls if call[0] == "loaded"] == [("loaded", "tiny-wan")] * 2
    assert (np.concatenate(list(rendered.media.chunks)) == 7).all()


def test_a_second_out_of_memory_fails_the_stage(tmp_path: Path, cache: ModelCache) -> None:
    spec, job = _job(_catalog_file(tmp_path))
    RecordingAdapter.oom_left["denoise"] = 2
    hooks = Recorder()
    with pytest.raises(RuntimeError, match="out of memory"):
        run_pipeline(cache, spec, job, hooks)
    assert RecordingAdapter.events == ["load", "denoise", "unload", "load", "denoise"]
    assert [call for call in hooks.calls if call[0] == "oom"] == [("oom", Stage.denoising)]
    assert ("enter", Stage.decoding) not in hooks.calls


def test_a_hook_that_stops_at_decoding_skips_the_decoder(tmp_path: Path, cache: ModelCache) -> None:
    spec, job = _job(_catalog_file(tmp_path))
    with pytest.raises(JobCanceled):
        run_pipeline(cache, spec, job, Recorder(stop_at=Stage.decoding))
    assert RecordingAdapter.events == ["load", "denoise"]


def test_generate_command_runs_under_the_model_time_limit(tmp_path: Path) -> None:
    catalog_path = _catalog_file(tmp_path, max_job_seconds=0.3)
    settings = Settings(catalog_path=str(catalog_path), models=ModelRuntimeSettings(device="cpu"))
    job = prepare_job(settings, _request())
    RecordingAdapter.step_sleep_s = 0.2  # 4 steps: past the limit within denoising
    stages: list[Stage] = []
    with pytest.raises(JobError) as raised:
        generate_once(settings, job, tmp_path / "out.mp4", on_stage=stages.append)
    assert raised.value.code == ErrorCode.timeout
    assert stages == [Stage.loading, Stage.denoising]
    assert "decode" not in RecordingAdapter.events
    assert not (tmp_path / "out.mp4").exists()

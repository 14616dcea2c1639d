"""LTX-2's production recipe on its tiny model: half-size stage 1, the x2 latent upsampler, the distilled
refinement with its LoRA; the ``fast`` variant as the distilled recipe. Real diffusers classes throughout."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from foundation.core.catalog import Catalog
from foundation.core.errors import JobCanceled
from pipelines.families.ltx2 import LTX2TextToVideo
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of, ltx2_adapter

MODEL = "tiny-ltx2-two-stage"


@pytest.fixture(scope="module")
def ltx(model_cache: ModelCache, catalog: Catalog) -> LTX2TextToVideo:
    return ltx2_adapter(model_cache, catalog, MODEL)


class _Passes:
    """Each transformer forward: the video tokens it saw and whether the distilled LoRA was active."""

    def __init__(self, adapter: LTX2TextToVideo) -> None:
        from peft.tuners.tuners_utils import BaseTunerLayer

        transformer = adapter.pipe.transformer
        self.lora_layer = next(m for m in transformer.modules() if isinstance(m, BaseTunerLayer))
        self.calls: list[tuple[int, bool]] = []
        self.handle = transformer.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        self.calls.append((int(kwargs["hidden_states"].shape[1]), not self.lora_layer.disable_adapters))

    def __enter__(self) -> _Passes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.remove()


def _tokens(adapter: LTX2TextToVideo, width: int, height: int, frames: int) -> int:
    pipe = adapter.pipe
    s, t = pipe.vae_spatial_compression_ratio, pipe.vae_temporal_compression_ratio
    return (width // s) * (height // s) * ((frames - 1) // t + 1)


@pytest.mark.parametrize(
    ("variant", "stage_1_lora", "stage_1_steps"),
    [("standard", False, 3), ("fast", True, 8)],
)
def test_stages_sizes_and_lora(
    ltx: LTX2TextToVideo, make_job: MakeJob, variant: str, stage_1_lora: bool, stage_1_steps: int
) -> None:
    job = make_job(MODEL, variant=variant, resolution="144p", ratio="16:9", duration_seconds=1)
    assert (job.gen_width, job.gen_height) == (256, 192)  # stride 64: the half size stays on the VAE's 32
    steps = StepLog()
    with _Passes(ltx) as passes:
        media = generate(ltx, job, steps)
    half = _tokens(ltx, job.gen_width // 2, job.gen_height // 2, job.num_frames)
    full = _tokens(ltx, job.gen_width, job.gen_height, job.num_frames)
    assert full == 4 * half
    refine = len(ltx.spec.two_stage.refine_sigmas)  # type: ignore[union-attr]
    # Stage 1 (batched CFG counts once per step), then the refinement: CFG off, LoRA on, full size.
    assert passes.calls == [(half, stage_1_lora)] * stage_1_steps + [(full, True)] * refine
    total = stage_1_steps + refine
    assert steps.calls == [(i, total) for i in range(1, total + 1)]
    frames = frames_of(media)
    assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3)
    assert media.audio is not None
    rate = media.audio.sample_rate
    assert media.audio.samples.shape[0] == 2  # the whole track: the encoder fits it to the kept frames
    assert media.audio.samples.shape[1] >= job.keep_frames * rate // job.fps


def test_two_stage_is_deterministic_per_seed(ltx: LTX2TextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, seed=3, resolution="144p", ratio="9:16", duration_seconds=2)
    first, again = generate(ltx, job, StepLog()), generate(ltx, job, StepLog())
    frames = frames_of(first)
    np.testing.assert_array_equal(frames, frames_of(again))
    assert first.audio is not None and again.audio is not None
    np.testing.assert_array_equal(first.audio.samples, again.audio.samples)
    other = generate(ltx, make_job(MODEL, seed=4, resolution="144p", ratio="9:16", duration_seconds=2), StepLog())
    assert not np.array_equal(frames, frames_of(other))


@pytest.mark.parametrize(("variant", "from_stage_2"), [("standard", False), ("fast", True)])
def test_standard_keeps_stage_1_audio_and_fast_the_refined_one(
    ltx: LTX2TextToVideo, make_job: MakeJob, variant: str, from_stage_2: bool
) -> None:
    """Upstream's ti2vid_two_stages discards stage 2's audio; distilled.py keeps it."""
    import torch

    job = make_job(MODEL, variant=variant, seed=2, resolution="144p", duration_seconds=1)
    cls = type(ltx.pipe)
    original = cls.__call__
    outputs: list[Any] = []

    @functools.wraps(original)
    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        outputs.append(out)
        return out

    cls.__call__ = recording  # type: ignore[method-assign]
    try:
        latents = ltx.denoise(job, StepLog())
    finally:
        cls.__call__ = original  # type: ignore[method-assign]
    assert len(outputs) == 2
    assert torch.equal(latents.audio, outputs[1 if from_stage_2 else 0].audio)


def test_cancel_in_the_refinement_stops_it(ltx: LTX2TextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, resolution="144p", duration_seconds=1)
    steps = StepLog(stop_at=job.steps + 1, error=JobCanceled("canceled"))
    with _Passes(ltx) as passes, pytest.raises(JobCanceled):
        ltx.denoise(job, steps)
    assert len(passes.calls) == job.steps + 1  # stage 1 plus one refinement step, then nothing
    assert steps.calls[-1] == (job.steps + 1, job.steps + 3)

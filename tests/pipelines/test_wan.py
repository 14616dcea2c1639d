"""Wan through its tiny model on CPU: sizes, frames, determinism, conditioning, cancel, shift, two experts.

Copy this module for a new family: resolve real catalog jobs with ``make_job``, run them through the
session ``model_cache``, and assert on what the encoder will receive.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foundation.core.catalog import Catalog
from foundation.core.errors import ErrorCode, JobCanceled, JobError
from foundation.settings.models import ModelRuntimeSettings
from pipelines.families.wan import WanLatents, WanTextToVideo
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.output import CHUNK_FRAMES
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of

MODEL = "tiny-wan"
SMALL = {"ratio": "1:1", "duration_seconds": 1}  # 144x144, 5 frames: the cheapest job


def _forward_counter(module: object) -> list[int]:
    """Count forward passes of a torch module with a real forward hook."""
    calls: list[int] = []
    module.register_forward_hook(lambda *_: calls.append(1))  # type: ignore[attr-defined]
    return calls


@pytest.fixture(scope="module")
def wan(model_cache: ModelCache, catalog: Catalog) -> WanTextToVideo:
    adapter = model_cache.get(catalog.models[MODEL])
    assert isinstance(adapter, WanTextToVideo)
    return adapter


@pytest.mark.parametrize(
    ("resolution", "ratio", "duration"),
    [("144p", "16:9", 1), ("144p", "9:16", 2), ("144p", "1:1", 1), ("144p", "4:3", 1), ("240p", "3:4", 1)],
)
def test_output_matches_the_request(
    wan: WanTextToVideo, make_job: MakeJob, resolution: str, ratio: str, duration: int
) -> None:
    job = make_job(MODEL, variant="fast", resolution=resolution, ratio=ratio, duration_seconds=duration)
    steps = StepLog()
    media = generate(wan, job, steps)
    frames = frames_of(media)
    assert (media.width, media.height) == (job.gen_width, job.gen_height)
    assert media.width >= job.width and media.height >= job.height
    assert media.num_frames == job.num_frames == frames.shape[0]
    assert frames.shape[0] >= job.keep_frames == duration * job.fps
    assert media.fps == job.fps
    assert media.audio is None
    assert steps.calls == [(i, job.steps) for i in range(1, job.steps + 1)]
    assert frames.std() > 0  # real pixels, not a constant fill


def test_frames_stream_in_bounded_chunks(wan: WanTextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, variant="fast", ratio="1:1", duration_seconds=3)  # 13 frames: more than one chunk
    sizes = [chunk.shape[0] for chunk in generate(wan, job, StepLog()).chunks]
    assert len(sizes) > 1
    assert max(sizes) <= CHUNK_FRAMES
    assert sum(sizes) == job.num_frames


def test_same_seed_same_frames_other_seed_or_prompt_differs(wan: WanTextToVideo, make_job: MakeJob) -> None:
    base = make_job(MODEL, seed=7, **SMALL)
    first = frames_of(generate(wan, base, StepLog()))
    again = frames_of(generate(wan, base, StepLog()))
    other_seed = frames_of(generate(wan, make_job(MODEL, seed=8, **SMALL), StepLog()))
    other_prompt = frames_of(
        generate(wan, make_job(MODEL, seed=7, prompt="a blue whale in deep water", **SMALL), StepLog())
    )
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other_seed)
    assert not np.array_equal(first, other_prompt)


def test_negative_prompt_is_passed_to_the_model(wan: WanTextToVideo, make_job: MakeJob) -> None:
    reference = frames_of(generate(wan, make_job(MODEL, seed=3, **SMALL), StepLog()))
    custom = frames_of(generate(wan, make_job(MODEL, seed=3, negative_prompt="cartoon, text", **SMALL), StepLog()))
    assert not np.array_equal(reference, custom)


def test_cancel_stops_within_one_step(wan: WanTextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, **SMALL)  # standard: 4 steps with CFG (two transformer passes per step)
    forwards = _forward_counter(wan.pipe.transformer)
    steps = StepLog(stop_at=2, error=JobCanceled())
    with pytest.raises(JobCanceled):
        generate(wan, job, steps)
    assert steps.calls == [(1, 4), (2, 4)]
    assert len(forwards) == 2 * 2


def test_decode_is_a_separate_call_that_can_be_repeated(wan: WanTextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, seed=4, **SMALL)
    steps = StepLog()
    forwards = _forward_counter(wan.pipe.transformer)
    latents = wan.denoise(job, steps)
    assert isinstance(latents, WanLatents)
    denoise_passes = len(forwards)
    first = frames_of(wan.decode(latents, job))
    again = frames_of(wan.decode(latents, job))  # what an out-of-memory retry of the decode stage does
    assert len(forwards) == denoise_passes  # decoding runs no transformer pass
    assert steps.calls == [(i, job.steps) for i in range(1, job.steps + 1)]
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, frames_of(generate(wan, job, StepLog())))


def test_unknown_pipeline_option_is_refused_before_denoising(wan: WanTextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, **SMALL).model_copy(update={"pipeline_kwargs": {"boundary_ration": 0.9}})
    steps = StepLog()
    with pytest.raises(JobError) as raised:
        wan.denoise(job, steps)
    assert raised.value.code == ErrorCode.pipeline_error
    assert "boundary_ration" in raised.value.message
    assert steps.calls == []


def test_variant_shift_rebuilds_the_scheduler(wan: WanTextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, variant="fast", seed=5, **SMALL)
    shifted = job.model_copy(update={"flow_shift": 8.0})
    base_frames = frames_of(generate(wan, job, StepLog()))
    assert wan.pipe.scheduler.config.flow_shift == job.flow_shift
    shifted_frames = frames_of(generate(wan, shifted, StepLog()))
    assert wan.pipe.scheduler.config.flow_shift == 8.0
    assert not np.array_equal(base_frames, shifted_frames)


def test_runtime_knobs_apply_and_offload_needs_cuda(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    override = {"vae_tiling": True, "offload": "model", "attention_backend": "native"}
    runtime = tiny_runtime.model_copy(update={"profile_overrides": {MODEL: override}})
    adapter = WanTextToVideo.load(catalog.models[MODEL], runtime, device="cpu", dtype="float32")
    try:
        assert adapter.pipe.vae.use_tiling
        backends = {
            getattr(getattr(module.processor, "_attention_backend", None), "value", None)
            for module in adapter.pipe.transformer.modules()
            if hasattr(module, "processor")
        }
        assert backends == {"native"}
        assert not hasattr(adapter.pipe.transformer, "_hf_hook")  # no CPU offload hooks on a CPU device
        media = generate(adapter, make_job(MODEL, variant="fast", **SMALL), StepLog())
        assert frames_of(media).shape == (media.num_frames, media.height, media.width, 3)
    finally:
        adapter.unload()


def test_frame_rule_violation_is_refused(wan: WanTextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL).model_copy(update={"num_frames": 10})
    with pytest.raises(JobError) as raised:
        generate(wan, job, StepLog())
    assert raised.value.code == ErrorCode.invalid_parameter
    assert "4k+1" in raised.value.message


def test_boundary_ratio_needs_a_second_expert(wan: WanTextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL).model_copy(update={"pipeline_kwargs": {"boundary_ratio": 0.875}})
    with pytest.raises(JobError, match="transformer_2"):
        generate(wan, job, StepLog())


@pytest.fixture(scope="module")
def two_expert_dir(
    wan: WanTextToVideo, tiny_runtime: ModelRuntimeSettings, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Tiny Wan 2.2-style weights: the tiny Wan plus a differently seeded low-noise expert."""
    import torch
    from diffusers import WanPipeline, WanTransformer3DModel

    torch.manual_seed(99)
    expert_2 = WanTransformer3DModel.from_config(wan.pipe.transformer.config)
    # The high-noise expert as saved, without the LoRA layers the loaded model carries for its distilled variant.
    expert_1 = WanTransformer3DModel.from_pretrained(
        Path(tiny_runtime.tiny_models_dir) / MODEL, subfolder="transformer"
    )
    pipe = WanPipeline(
        tokenizer=wan.pipe.tokenizer,
        text_encoder=wan.pipe.text_encoder,
        vae=wan.pipe.vae,
        scheduler=wan.pipe.scheduler,
        transformer=expert_1,
        transformer_2=expert_2,
    )
    out = tmp_path_factory.mktemp("tiny-wan-a14b-shape")
    pipe.save_pretrained(out)
    return out


def test_two_experts_switch_at_the_boundary(
    two_expert_dir: Path, tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    base = catalog.models[MODEL]
    t2v = base.modes["text_to_video"]
    plain = {name: v for name, v in t2v.variants.items() if v.lora is None}  # its LoRA file is tiny-wan's
    spec = base.model_copy(
        update={
            "id": "tiny-wan-a14b",
            "weights": str(two_expert_dir),
            "tiny": False,
            "modes": {"text_to_video": t2v.model_copy(update={"variants": plain})},
        }
    )
    adapter = WanTextToVideo.load(spec, tiny_runtime, device="cpu", dtype="float32")
    try:
        high = _forward_counter(adapter.pipe.transformer)
        low = _forward_counter(adapter.pipe.transformer_2)
        job = make_job(MODEL, **SMALL).model_copy(
            update={"guidance_scale_2": 3.0, "flow_shift": 12.0, "pipeline_kwargs": {"boundary_ratio": 0.875}}
        )
        media = generate(adapter, job, StepLog())
        assert frames_of(media).shape[0] == job.num_frames
        assert adapter.pipe.config.boundary_ratio == 0.875
        assert high and low  # both experts ran
        assert len(high) + len(low) == 2 * job.steps  # CFG: two passes per step, each by one expert
    finally:
        adapter.unload()
    assert adapter.pipe is None
    with pytest.raises(JobError, match="unloaded"):
        generate(adapter, job, StepLog())

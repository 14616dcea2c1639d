"""LTX-2 through its tiny model on CPU: video and stereo audio sizes, determinism, guidance passes, cancel."""

from __future__ import annotations

import numpy as np
import pytest

from foundation.core.catalog import Catalog
from foundation.core.errors import ErrorCode, JobCanceled, JobError
from pipelines.families.ltx2 import LTX2Latents, LTX2TextToVideo
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of

MODEL = "tiny-ltx2"
SMALL = {"ratio": "1:1", "duration_seconds": 1}  # 160x160, 9 frames


def _forward_counter(module: object) -> list[int]:
    calls: list[int] = []
    module.register_forward_hook(lambda *_: calls.append(1))  # type: ignore[attr-defined]
    return calls


@pytest.fixture(scope="module")
def ltx(model_cache: ModelCache, catalog: Catalog) -> LTX2TextToVideo:
    adapter = model_cache.get(catalog.models[MODEL])
    assert isinstance(adapter, LTX2TextToVideo)
    return adapter


@pytest.mark.parametrize(
    ("resolution", "ratio", "duration", "audio"),
    [
        ("144p", "16:9", 1, True),
        ("144p", "9:16", 2, True),
        ("144p", "3:4", 3, True),
        ("144p", "1:1", 1, False),
        ("240p", "4:3", 1, True),
    ],
)
def test_output_matches_the_request(
    ltx: LTX2TextToVideo, make_job: MakeJob, resolution: str, ratio: str, duration: int, audio: bool
) -> None:
    job = make_job(MODEL, variant="fast", resolution=resolution, ratio=ratio, duration_seconds=duration, audio=audio)
    steps = StepLog()
    media = generate(ltx, job, steps)
    frames = frames_of(media)
    assert (media.width, media.height) == (job.gen_width, job.gen_height)
    assert job.gen_width % 32 == 0 and job.gen_height % 32 == 0
    assert media.num_frames == job.num_frames == frames.shape[0]
    assert job.num_frames % 8 == 1 and job.num_frames >= job.keep_frames == duration * job.fps
    assert media.fps == job.fps
    assert steps.calls == [(i, job.steps) for i in range(1, job.steps + 1)]
    if not audio:
        assert media.audio is None
        return
    assert media.audio is not None
    rate = ltx.pipe.vocoder.config.output_sampling_rate
    assert media.audio.sample_rate == rate == 24000
    assert media.audio.channels == 2
    assert media.audio.samples.dtype == np.float32
    # The whole track: the encoder fits it to the kept frames (tests/integration/test_encoder.py).
    assert media.audio.samples.shape[0] == 2
    assert media.audio.samples.shape[1] >= job.keep_frames * rate // job.fps
    assert media.audio.samples.std() > 0


def test_same_seed_same_output_other_seed_or_prompt_differs(ltx: LTX2TextToVideo, make_job: MakeJob) -> None:
    base = make_job(MODEL, seed=11, **SMALL)
    first, again = generate(ltx, base, StepLog()), generate(ltx, base, StepLog())
    other_seed = generate(ltx, make_job(MODEL, seed=12, **SMALL), StepLog())
    other_prompt = generate(ltx, make_job(MODEL, seed=11, prompt="rain on a tin roof at night", **SMALL), StepLog())
    assert first.audio and again.audio and other_seed.audio and other_prompt.audio
    frames = frames_of(first)
    np.testing.assert_array_equal(frames, frames_of(again))
    np.testing.assert_array_equal(first.audio.samples, again.audio.samples)
    assert not np.array_equal(frames, frames_of(other_seed))
    assert not np.array_equal(first.audio.samples, other_seed.audio.samples)
    assert not np.array_equal(frames, frames_of(other_prompt))
    assert not np.array_equal(first.audio.samples, other_prompt.audio.samples)


def test_decode_is_a_separate_call_that_can_be_repeated(ltx: LTX2TextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, seed=13, **SMALL)
    passes = _forward_counter(ltx.pipe.transformer)
    vocoder_calls = _forward_counter(ltx.pipe.vocoder)
    latents = ltx.denoise(job, StepLog())
    assert isinstance(latents, LTX2Latents)
    assert len(passes) == job.steps and vocoder_calls == []  # the audio decoder waits for decode
    first, again = ltx.decode(latents, job), ltx.decode(latents, job)  # again: an out-of-memory retry
    assert len(passes) == job.steps and len(vocoder_calls) == 2
    assert first.audio and again.audio
    frames = frames_of(first)  # chunks can be consumed once
    np.testing.assert_array_equal(frames, frames_of(again))
    np.testing.assert_array_equal(first.audio.samples, again.audio.samples)
    whole = generate(ltx, job, StepLog())
    assert whole.audio
    np.testing.assert_array_equal(frames, frames_of(whole))
    np.testing.assert_array_equal(first.audio.samples, whole.audio.samples)


def test_no_audio_skips_the_audio_decoder(ltx: LTX2TextToVideo, make_job: MakeJob) -> None:
    vocoder_calls = _forward_counter(ltx.pipe.vocoder)
    silent = generate(ltx, make_job(MODEL, variant="fast", audio=False, **SMALL), StepLog())
    assert silent.audio is None
    assert vocoder_calls == []
    loud = generate(ltx, make_job(MODEL, variant="fast", audio=True, **SMALL), StepLog())
    assert loud.audio is not None
    assert len(vocoder_calls) == 1


def test_stg_and_modality_guidance_stay_off_unless_the_variant_enables_them(
    ltx: LTX2TextToVideo, make_job: MakeJob
) -> None:
    job = make_job(MODEL, **SMALL)  # standard: CFG on, STG and modality guidance off in the catalog
    passes = _forward_counter(ltx.pipe.transformer)
    generate(ltx, job.model_copy(update={"pipeline_kwargs": {}}), StepLog())  # the adapter's own defaults
    assert len(passes) == job.steps  # one batched CFG pass per step
    passes.clear()
    generate(ltx, job, StepLog())
    assert len(passes) == job.steps
    passes.clear()
    enabled = {**job.pipeline_kwargs, "stg_scale": 1.0, "spatio_temporal_guidance_blocks": [1], "modality_scale": 3.0}
    generate(ltx, job.model_copy(update={"pipeline_kwargs": enabled}), StepLog())
    assert len(passes) > job.steps


def test_cancel_stops_within_one_step(ltx: LTX2TextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, **SMALL)
    passes = _forward_counter(ltx.pipe.transformer)
    vocoder_calls = _forward_counter(ltx.pipe.vocoder)
    steps = StepLog(stop_at=2, error=JobCanceled())
    with pytest.raises(JobCanceled):
        generate(ltx, job, steps)
    assert steps.calls == [(1, job.steps), (2, job.steps)]
    assert len(passes) == 2
    assert vocoder_calls == []


def test_frame_rule_violation_is_refused(ltx: LTX2TextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, **SMALL).model_copy(update={"num_frames": 16})  # the pipeline would silently use 9
    with pytest.raises(JobError) as raised:
        generate(ltx, job, StepLog())
    assert raised.value.code == ErrorCode.invalid_parameter
    assert "8k+1" in raised.value.message

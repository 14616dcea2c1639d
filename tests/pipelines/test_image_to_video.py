"""image_to_video on every family's tiny model: the output has the asked shape, and the image is really used.

What "the first frame matches the input" can mean on random weights: a tiny model's decoder is nearly blind
(its round trip of an image scores about 9 dB against the image itself), so the first frame is compared with
what a perfect model gives through the same VAE, and a different image is the negative control:
- Wan 2.2 TI2V (``expand_timesteps``) holds the image latent as latent frame 0 at timestep 0, and the Wan VAE
  decodes causally, so the first frame must equal decode(encode(fitted image)) (a PSNR threshold; the other
  image's round trip must score clearly lower);
- LTX-2 keeps the image latent clean as latent frame 0 too, but its decoder is not causal (frame 0 depends on
  the generated frames after it), so the check is on the latents: frame 0 equals encode(fitted image after
  the pipeline's CRF-33 re-compression), and the other image's latent does not;
- Wan 2.1 I2V and Wan 2.2 I2V A14B do not copy the image into the video: a trained transformer reproduces
  it from its condition. Here we show that the image reaches the transformer, exactly as the pipeline
  prepares it (the VAE latents of image-then-zeros in the condition channels, and for 2.1 the CLIP image
  tokens), and that another image changes the output under the same seed. That the trained weights then
  reproduce the image is not something random weights can show.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from foundation.core.catalog import Catalog
from foundation.core.errors import ErrorCode, JobCanceled, JobError
from foundation.settings.models import ModelRuntimeSettings
from pipelines.families.ltx2 import LTX2Latents
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.registry import load_adapter
from tests.pipelines.helpers import StepLog, frames_of
from tests.pipelines.i2v_support import fitted, i2v_job, psnr, wan_round_trip

# decode(encode(image)) vs the first generated frame: equal up to rounding when the image is latent frame 0.
FIRST_FRAME_MIN_DB = 50.0
# How much better the right image's round trip must score than another image's (the tiny VAE is nearly blind,
# so two different images' round trips are only ~45 dB apart; a real VAE separates them by far more).
CONTROL_MARGIN_DB = 10.0


class TransformerCalls:
    """The keyword arguments of every call of a pipeline's transformers, by name; hooks removed by ``close``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._handles: list[Any] = []

    def watch(self, pipe: Any) -> None:
        for name in ("transformer", "transformer_2"):
            module = getattr(pipe, name, None)
            if module is not None:
                self._handles.append(module.register_forward_pre_hook(self._hook(name), with_kwargs=True))

    def _hook(self, name: str) -> Any:
        def hook(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
            self.calls.append((name, dict(kwargs)))

        return hook

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


@pytest.fixture
def transformer_calls() -> Iterator[TransformerCalls]:
    watcher = TransformerCalls()
    yield watcher
    watcher.close()


def _condition_latents(pipe: Any, image: Any, job: Any) -> Any:
    """What WanImageToVideoPipeline concatenates to the noise for 2.1/2.2 A14B: normalised VAE latents of the
    image followed by zero frames."""
    import torch

    pixels = pipe.video_processor.preprocess(image, height=job.gen_height, width=job.gen_width).unsqueeze(2)
    video = torch.cat([pixels, pixels.new_zeros(1, 3, job.num_frames - 1, job.gen_height, job.gen_width)], dim=2)
    z = pipe.vae.config.z_dim
    mean = torch.tensor(pipe.vae.config.latents_mean).view(1, z, 1, 1, 1)
    std = torch.tensor(pipe.vae.config.latents_std).view(1, z, 1, 1, 1)
    with torch.no_grad():
        latents = pipe.vae.encode(video.to(pipe.vae.dtype)).latent_dist.mode()
    return (latents - mean) / std


# ---------------------------------------------------------------------------------------- Wan 2.2 TI2V 5B


def test_wan_ti2v_first_frame_is_the_vae_round_trip_of_the_image(model_cache: ModelCache, catalog: Catalog) -> None:
    spec = catalog.models["tiny-wan-ti2v"]
    adapter = model_cache.get(spec)
    job = i2v_job(catalog, spec.id, duration_seconds=2)
    assert (job.gen_width, job.gen_height) == (256, 128)  # its catalog size: on the 32 stride of the z48 VAE
    steps = StepLog()
    frames = frames_of(generate(adapter, job, steps, image=fitted(job, 1)))
    assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3) and job.num_frames == 9
    assert steps.calls[-1] == (job.steps, job.steps)
    pipe = adapter.pipe  # type: ignore[attr-defined]
    right, other = wan_round_trip(pipe, fitted(job, 1)), wan_round_trip(pipe, fitted(job, 4))
    assert psnr(frames[0], right) >= FIRST_FRAME_MIN_DB
    assert psnr(frames[0], other) <= psnr(frames[0], right) - CONTROL_MARGIN_DB
    assert psnr(frames[0], other) < FIRST_FRAME_MIN_DB
    # The later frames are generated, not copies of the image.
    assert psnr(frames[-1], right) < FIRST_FRAME_MIN_DB


def test_wan_ti2v_also_makes_text_to_video_and_refuses_a_mode_without_its_input(
    model_cache: ModelCache, catalog: Catalog
) -> None:
    spec = catalog.models["tiny-wan-ti2v"]
    adapter = model_cache.get(spec)
    image_job = i2v_job(catalog, spec.id)
    text_job = image_job.model_copy(update={"mode": "text_to_video"})
    frames = frames_of(generate(adapter, text_job, StepLog()))
    assert frames.shape == (text_job.num_frames, text_job.gen_height, text_job.gen_width, 3)
    with pytest.raises(JobError) as missing:
        adapter.denoise(image_job, StepLog())
    assert missing.value.code is ErrorCode.invalid_payload
    with pytest.raises(JobError) as extra:
        adapter.denoise(text_job, StepLog(), image=fitted(text_job, 1))  # type: ignore[call-arg]
    assert extra.value.code is ErrorCode.invalid_payload


def test_an_image_job_is_canceled_within_one_step(model_cache: ModelCache, catalog: Catalog) -> None:
    adapter = model_cache.get(catalog.models["tiny-wan-ti2v"])
    job = i2v_job(catalog, "tiny-wan-ti2v", variant="standard")
    steps = StepLog(stop_at=1, error=JobCanceled())
    with pytest.raises(JobCanceled):
        adapter.denoise(job, steps, image=fitted(job, 1))  # type: ignore[call-arg]
    assert steps.calls == [(1, job.steps)]


# ---------------------------------------------------------------------------------------- Wan 2.1 I2V / 2.2 I2V A14B


@pytest.mark.parametrize("model", ["tiny-wan-i2v", "tiny-wan-i2v-a14b"])
def test_wan_i2v_feeds_the_image_to_the_transformer_and_it_changes_the_video(
    model: str, model_cache: ModelCache, catalog: Catalog, transformer_calls: TransformerCalls
) -> None:
    import torch

    adapter = model_cache.get(catalog.models[model])
    pipe = adapter.pipe  # type: ignore[attr-defined]
    job = i2v_job(catalog, model)
    image = fitted(job, 1)
    transformer_calls.watch(pipe)
    first = frames_of(generate(adapter, job, StepLog(), image=image))
    transformer_calls.close()
    assert first.shape == (job.num_frames, job.gen_height, job.gen_width, 3)
    seen = transformer_calls.calls
    # Channels: 16 noise, 4 first-frame mask, 16 condition latents = the image's, exactly as prepared.
    hidden = seen[0][1]["hidden_states"]
    assert hidden.shape[1] == 36
    assert torch.allclose(hidden[:, 20:], _condition_latents(pipe, image, job), atol=1e-4)
    if model == "tiny-wan-i2v":  # Wan 2.1: CLIP image tokens in the cross-attention as well
        with torch.no_grad():
            tokens = pipe.encode_image(image, torch.device("cpu"))
        assert torch.allclose(seen[0][1]["encoder_hidden_states_image"], tokens, atol=1e-5)
    else:  # Wan 2.2 A14B: no image encoder; the high-noise expert first, then the low-noise one
        assert pipe.image_encoder is None and seen[0][1]["encoder_hidden_states_image"] is None
        assert [name for name, _ in seen] == ["transformer", "transformer_2"]
    other = frames_of(generate(adapter, job, StepLog(), image=fitted(job, 4)))
    assert not np.array_equal(first, other)  # same seed and prompt: the image changed the video


# ---------------------------------------------------------------------------------------- LTX-2


def _ltx2_image_latent(pipe: Any, image: Any, width: int, height: int) -> Any:
    """The image's latent as LTX2ImageToVideoPipeline prepares it: CRF-33 re-compression, then the VAE's mode."""
    import torch
    from diffusers.pipelines.ltx2.utils import apply_image_conditioning_crf
    from PIL import Image

    recompressed = Image.fromarray(apply_image_conditioning_crf(np.asarray(image), 33))
    pixels = pipe.video_processor.preprocess(recompressed, height=height, width=width)
    with torch.no_grad():
        return pipe.vae.encode(pixels.unsqueeze(2)).latent_dist.mode()[:, :, 0]


def test_ltx2_image_is_the_clean_first_latent_frame_and_the_clip_has_audio(
    model_cache: ModelCache, catalog: Catalog
) -> None:
    import torch

    adapter = model_cache.get(catalog.models["tiny-ltx2"])
    pipe = adapter.pipe  # type: ignore[attr-defined]
    job = i2v_job(catalog, "tiny-ltx2", audio=True)
    latents = adapter.denoise(job, StepLog(), image=fitted(job, 1))  # type: ignore[call-arg]
    assert isinstance(latents, LTX2Latents)
    frame0 = latents.video[:, :, 0]
    size = (job.gen_width, job.gen_height)
    assert torch.allclose(frame0, _ltx2_image_latent(pipe, fitted(job, 1), *size), atol=1e-4)
    assert not torch.allclose(frame0, _ltx2_image_latent(pipe, fitted(job, 4), *size), atol=1e-2)  # control
    media = adapter.decode(latents, job)
    frames = frames_of(media)
    assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3) and job.num_frames == 9
    assert media.audio is not None
    assert media.audio.samples.shape[0] == 2  # the whole track: the encoder fits it to the kept frames
    assert media.audio.samples.shape[1] >= round(job.keep_frames / job.fps * media.audio.sample_rate)
    text = frames_of(generate(adapter, job.model_copy(update={"mode": "text_to_video"}), StepLog()))
    assert not np.array_equal(frames, text)


def test_ltx2_two_stage_conditions_both_stages_on_the_image(model_cache: ModelCache, catalog: Catalog) -> None:
    import torch

    adapter = model_cache.get(catalog.models["tiny-ltx2-two-stage"])
    pipe = adapter.pipe  # type: ignore[attr-defined]
    job = i2v_job(catalog, "tiny-ltx2-two-stage", variant="standard")
    steps = StepLog()
    latents = adapter.denoise(job, steps, image=fitted(job, 1))  # type: ignore[call-arg]
    assert isinstance(latents, LTX2Latents)
    assert steps.calls[-1][0] == steps.calls[-1][1] == job.steps + 3  # stage 1, then the 3 refinement sigmas
    # The refinement's clean frame 0 is the image encoded at full size (stage 1 ran at half the size).
    size = (job.gen_width, job.gen_height)
    assert torch.allclose(latents.video[:, :, 0], _ltx2_image_latent(pipe, fitted(job, 1), *size), atol=1e-4)
    assert not torch.allclose(latents.video[:, :, 0], _ltx2_image_latent(pipe, fitted(job, 4), *size), atol=1e-2)
    frames = frames_of(adapter.decode(latents, job))
    assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3)


def test_the_wan21_i2v_profile_keeps_the_image_encoder_in_float32_under_bfloat16(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog
) -> None:
    """The shipped Wan 2.1 I2V profile (VAE and CLIP image encoder float32, the rest bf16) on its tiny model."""
    import torch

    profile = catalog.models["wan2.1-i2v-14b-480p"].runtime
    override = profile.model_dump(exclude={"notes"})
    runtime = tiny_runtime.model_copy(update={"dtype": "bfloat16", "profile_overrides": {"tiny-wan-i2v": override}})
    adapter = load_adapter(catalog.models["tiny-wan-i2v"], runtime)
    try:
        pipe = adapter.pipe  # type: ignore[attr-defined]
        assert pipe.transformer.dtype == torch.bfloat16 and pipe.text_encoder.dtype == torch.bfloat16
        assert pipe.image_encoder.dtype == torch.float32 and pipe.vae.dtype == torch.float32
        job = i2v_job(catalog, "tiny-wan-i2v")
        frames = frames_of(generate(adapter, job, StepLog(), image=fitted(job, 1)))
        assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3) and frames.std() > 0
    finally:
        adapter.unload()

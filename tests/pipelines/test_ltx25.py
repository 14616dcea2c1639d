"""LTX-2.5's recipe on its tiny stand-in: upstream's distilled pipeline over a distilled checkpoint (no LoRA, stage 1
on ltx-core's ancestral Euler step, the refinement plain Euler) and the diffusion video decoder in place of the VAE's.
Real diffusers classes throughout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from foundation.core.catalog import Catalog, ModelSpec
from pipelines.families.ltx2 import LTX2TextToVideo, ancestral_step
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.weights import needed
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of, ltx2_adapter

MODEL = "tiny-ltx2.5"


@pytest.fixture(scope="module")
def ltx25(model_cache: ModelCache, catalog: Catalog) -> LTX2TextToVideo:
    return ltx2_adapter(model_cache, catalog, MODEL)


def test_the_ancestral_step_lands_on_the_next_sigmas_marginal() -> None:
    """From x = (1 - s) x0 + s n with the exact velocity n - x0, ltx-core's eta-1 step gives (1 - s') x0 + s' n'
    with n' fresh unit noise: the mean and spread of many draws say so; at the last sigma, x0 itself."""
    gen = torch.Generator().manual_seed(0)
    x0 = torch.full((200_000,), 0.5)
    n = torch.randn(x0.shape, generator=gen)
    sigma, sigma_next = torch.tensor(0.909375), torch.tensor(0.725)
    x = (1 - sigma) * x0 + sigma * n
    out = ancestral_step(x, n - x0, sigma, sigma_next, torch.randn(x0.shape, generator=gen))
    assert float(out.mean()) == pytest.approx(float((1 - sigma_next) * 0.5), abs=0.01)
    assert float(out.std()) == pytest.approx(float(sigma_next), abs=0.01)
    # Not a plain Euler step: that one keeps the old noise exactly (its spread would be the same, its draw not).
    euler = x + (sigma_next - sigma) * (n - x0)
    assert not torch.allclose(out, euler, atol=0.05)
    last = ancestral_step(x, n - x0, sigma, torch.tensor(0.0), torch.zeros_like(x))
    assert torch.allclose(last, x0, atol=1e-5)


def _half_size_tokens(adapter: LTX2TextToVideo, job: Any) -> int:
    """Video tokens of stage 1 (half the job's size): the refinement sees four times as many."""
    pipe = adapter.pipe
    s, t = pipe.vae_spatial_compression_ratio, pipe.vae_temporal_compression_ratio
    return (job.gen_width // 2 // s) * (job.gen_height // 2 // s) * ((job.num_frames - 1) // t + 1)


class _Stages:
    """Per transformer forward: the video tokens it saw and the scheduler class the pipeline stepped with."""

    def __init__(self, adapter: LTX2TextToVideo) -> None:
        self.adapter = adapter
        self.calls: list[tuple[int, str]] = []
        self.handle = adapter.pipe.transformer.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        pipe = self.adapter._image_pipe if self.adapter._image_pipe is not None else self.adapter.pipe
        scheduler = type(pipe.scheduler).__name__
        self.calls.append((int(kwargs["hidden_states"].shape[1]), scheduler))

    def __enter__(self) -> _Stages:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.remove()


def test_the_distilled_checkpoint_runs_both_stages_without_a_lora(ltx25: LTX2TextToVideo, make_job: MakeJob) -> None:
    job = make_job(MODEL, resolution="144p", ratio="16:9", duration_seconds=1)
    assert ltx25.pipe.get_list_adapters() == {}  # nothing loaded: the checkpoint is distilled
    with _Stages(ltx25) as stages:
        media = generate(ltx25, job, StepLog())
    half = _half_size_tokens(ltx25, job)
    # 8 distilled sigmas at half size stepped ancestrally, then the 3 refinement sigmas at full size, plain Euler.
    assert stages.calls == [(half, "AncestralEulerScheduler")] * 8 + [(4 * half, "FlowMatchEulerDiscreteScheduler")] * 3
    assert frames_of(media).shape == (job.num_frames, job.gen_height, job.gen_width, 3)
    assert media.audio is not None


def test_the_ancestral_stage_draws_from_the_jobs_seed(
    ltx25: LTX2TextToVideo, model_cache: ModelCache, catalog: Catalog, make_job: MakeJob
) -> None:
    """The same seed repeats the clip (the fresh noise comes from the job's generator), another seed changes it, and
    the same job on plain Euler differs: the ancestral step is what ran."""
    job = make_job(MODEL, resolution="144p", ratio="1:1", duration_seconds=1, seed=11)
    first, again = (frames_of(generate(ltx25, job, StepLog())) for _ in range(2))
    assert np.array_equal(first, again)
    other = frames_of(
        generate(ltx25, make_job(MODEL, resolution="144p", ratio="1:1", duration_seconds=1, seed=12), StepLog())
    )
    assert not np.array_equal(first, other)
    spec = catalog.models[MODEL]
    assert spec.two_stage is not None
    euler_spec = spec.model_copy(
        update={
            "id": "tiny-ltx2.5-euler",
            "two_stage": spec.two_stage.model_copy(update={"distilled_sampler": "euler"}),
        }
    )
    euler = LTX2TextToVideo.assemble(
        euler_spec,
        ltx25.runtime,
        ltx25.pipe,
        device=ltx25.device,
        dtype=ltx25.dtype,
        profile=ltx25.profile,
        parts={"latent_upsampler": ltx25.upsample_pipe.latent_upsampler, "diffusion_decoder": ltx25.video_decoder},
    )
    assert not np.array_equal(
        first, frames_of(generate(euler, job.model_copy(update={"model": euler_spec.id}), StepLog()))
    )


def test_the_diffusion_decoder_decodes_the_video_and_the_vae_does_not(
    ltx25: LTX2TextToVideo, make_job: MakeJob
) -> None:
    job = make_job(MODEL, resolution="240p", ratio="9:16", duration_seconds=2, seed=5)
    decoder_calls, vae_calls = [], []
    hooks = [
        ltx25.video_decoder.decoder.register_forward_pre_hook(lambda *a: decoder_calls.append(1)),
        ltx25.pipe.vae.decoder.register_forward_pre_hook(lambda *a: vae_calls.append(1)),
    ]
    try:
        media = generate(ltx25, job, StepLog())
    finally:
        for hook in hooks:
            hook.remove()
    # One untiled pass of the diffusion decoder (the clip is smaller than a tile), none of the VAE's decoder.
    assert (decoder_calls, vae_calls) == ([1], [])
    assert ltx25.video_decoder in ltx25.held_modules()
    frames = frames_of(media)
    assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3)
    assert frames.std() > 0  # random weights, but a picture: not a constant


def test_the_catalog_refuses_what_a_distilled_checkpoint_cannot_run(catalog: Catalog) -> None:
    spec = catalog.models["ltx-2.5"]
    raw = spec.model_dump()
    raw["modes"]["text_to_video"]["variants"]["standard"]["pipeline_kwargs"].pop("distilled")
    raw["modes"]["text_to_video"]["variants"]["standard"]["steps"] = 30
    with pytest.raises(ValueError, match="the checkpoint is distilled"):
        ModelSpec.model_validate(raw)
    wan = catalog.models["wan2.1-t2v-1.3b"].model_dump()
    with pytest.raises(ValueError, match=r"diffusion_decoder is LTX-2\.5"):
        ModelSpec.model_validate({**wan, "diffusion_decoder": "diffusion_decoder"})


def test_a_pull_fetches_the_diffusion_decoder_and_no_lora(catalog: Catalog) -> None:
    (repo,) = needed(catalog.models["ltx-2.5"])
    assert repo.repo == "Lightricks/LTX-2.5-Diffusers"
    assert "diffusion_decoder/*.safetensors" in repo.allow
    assert "latent_upsampler/*.safetensors" in repo.allow
    assert not any(name.endswith(".safetensors") and "/" not in name for name in repo.allow)  # no LoRA file


DEV = "tiny-ltx2.5-dev"


@pytest.fixture(scope="module")
def ltx25_dev(model_cache: ModelCache, catalog: Catalog) -> LTX2TextToVideo:
    return ltx2_adapter(model_cache, catalog, DEV)


def _first_weight(folder: Path) -> tuple[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "diffusion_pytorch_model.safetensors"))
    name = sorted(n for n in tensors if n.endswith("attn1.to_q.weight"))[0]
    return name, tensors[name]


def test_the_dev_entry_loads_the_full_transformer_in_place_of_the_distilled_one(
    ltx25_dev: LTX2TextToVideo, tiny_models_dir: Path
) -> None:
    """tiny-ltx2 holds two transformers, as LTX-2.5-Diffusers: ``transformer/`` (what model_index.json names, the
    distilled one) and ``transformer_full/``. The dev entry runs the second, with the distilled LoRA on it."""
    full_name, full = _first_weight(tiny_models_dir / "tiny-ltx2" / "transformer_full")
    _, distilled = _first_weight(tiny_models_dir / "tiny-ltx2" / "transformer")
    assert not torch.equal(full, distilled)
    loaded = dict(ltx25_dev.pipe.transformer.named_parameters())
    base = next(v for k, v in loaded.items() if k.startswith(full_name.removesuffix(".weight")) and "base_layer" in k)
    assert torch.equal(base.detach().cpu(), full)
    assert set(ltx25_dev.pipe.get_list_adapters()["transformer"]) == {"distilled"}


def test_the_dev_entry_guides_stage_1_and_refines_with_the_lora(ltx25_dev: LTX2TextToVideo, make_job: MakeJob) -> None:
    """Upstream's TI2VidTwoStagesPipeline: stage 1 at half size with CFG (one batched pass of the prompt and the
    negative prompt per step) and the LoRA off, plain Euler; the refinement at full size with the LoRA on and no
    guidance; the diffusion decoder decodes."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    job = make_job(DEV, resolution="144p", ratio="16:9", duration_seconds=1)
    transformer = ltx25_dev.pipe.transformer
    lora_layer = next(m for m in transformer.modules() if isinstance(m, BaseTunerLayer))
    calls: list[tuple[int, int, bool, str]] = []

    def record(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        scheduler = type(ltx25_dev.pipe.scheduler).__name__
        states = kwargs["hidden_states"]
        calls.append((int(states.shape[0]), int(states.shape[1]), not lora_layer.disable_adapters, scheduler))

    handle = transformer.register_forward_pre_hook(record, with_kwargs=True)
    decoded: list[int] = []
    decoder_hook = ltx25_dev.video_decoder.decoder.register_forward_pre_hook(lambda *a: decoded.append(1))
    try:
        media = generate(ltx25_dev, job, StepLog())
    finally:
        handle.remove()
        decoder_hook.remove()
    half = _half_size_tokens(ltx25_dev, job)
    euler = "FlowMatchEulerDiscreteScheduler"
    assert calls == [(2, half, False, euler)] * job.steps + [(1, 4 * half, True, euler)] * 3
    assert decoded == [1]
    assert frames_of(media).shape == (job.num_frames, job.gen_height, job.gen_width, 3)
    assert media.audio is not None


def test_a_dev_pull_fetches_the_full_transformer_and_its_lora_not_the_distilled_one(catalog: Catalog) -> None:
    (repo,) = needed(catalog.models["ltx-2.5-dev"])
    assert repo.repo == "Lightricks/LTX-2.5-Diffusers"
    assert "transformer_full/*.safetensors" in repo.allow
    assert "ltx-2.5-22b-distilled-lora-450-bf16.safetensors" in repo.allow
    assert repo.replaced == ("transformer",)

"""A catalog model's production adapter over a pipeline of random full-size components (``--random-weights``).

Each family adapter's ``load`` is ``from_pretrained`` + the family's post-load steps (variant LoRAs, the
runtime profile, LTX-2's upsampler) + the adapter's constructor. Here the pipeline is assembled from
``pipelines.planning.random_weights`` components instead of read from a checkpoint, the same post-load
steps run on it (random LoRAs of the published ranks stand in for the LoRA files), and the same constructor
takes it: every ``denoise`` and ``decode`` afterwards is the production code.

What a checkpoint would bring and no architecture config holds is made here: tokenizers (byte-level ones
built in code, as the tiny models use: prompts are padded to the family's fixed text length either way, so
the text encoders see the real token counts) and schedulers (the classes the checkpoints ship; each
variant's shift is applied by the adapter as in production).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from foundation.settings.models import ModelRuntimeSettings
from pipelines.planning.memory_plan import LORA_RANK
from pipelines.planning.random_weights import add_random_lora, arch_entries, build_random, shrink
from pipelines.runtime.profile import apply_profile, lora_adapter_name, quiet_progress_bars, runtime_profile

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec, RuntimeProfile

__all__ = ["RandomModel", "random_adapter"]

WAN_LORA_RANK = 64  # lightx2v's step-distillation LoRAs (..._lora_rank64_lightx2v_4step...)


@dataclass
class RandomModel:
    """A production adapter over random components, and how to build any of them again (same weights)."""

    adapter: Any
    profile: RuntimeProfile
    denoisers: list[str]
    text_encoders: list[str]
    weight_bytes: int
    device: str
    recipes: dict[str, tuple[dict[str, Any], str, int]]  # component -> (arch entry, dtype, seed)

    def rebuild(self, name: str) -> Any:
        """Component ``name`` built again from the same entry, dtype and seed: the same random weights."""
        entry, dtype, seed = self.recipes[name]
        return build_random(entry, device=self.device, dtype=dtype, seed=seed)


def random_adapter(
    spec: ModelSpec, *, device: str, variants: list[tuple[str, str]], scale: str = "full", seed: int = 0
) -> RandomModel:
    """``spec``'s adapter over random components from ``configs/arch/<id>/``, under its runtime profile with
    offload off, with random LoRAs for the ``(mode, variant)`` pairs that have one. ``scale``: ``full``, ``tiny``
    (the tiny widths of ``shrink``) or ``shallow`` (real widths, a few blocks); the last two in float32, as a CPU
    worker runs (bf16 matmuls on a CPU are slow)."""
    quiet_progress_bars()
    runtime = ModelRuntimeSettings(device=device, profile_overrides={spec.id: {"offload": "none"}})
    profile = runtime_profile(spec, runtime)
    entries = arch_entries(spec.id)
    if not entries:
        raise SystemExit(f"{spec.id}: no architecture config under configs/arch/{spec.id}/")
    entries = entries if scale == "full" else shrink(entries, widths=scale == "tiny")
    dtype = spec.dtype if scale == "full" else "float32"
    recipes: dict[str, tuple[dict[str, Any], str, int]] = {
        name: (entry, profile.dtypes.get(name, dtype), seed + i) for i, (name, entry) in enumerate(entries.items())
    }
    parts = {name: build_random(e, device=device, dtype=d, seed=s) for name, (e, d, s) in recipes.items()}
    size = sum(t.numel() * t.element_size() for m in parts.values() for t in [*m.parameters(), *m.buffers()])
    build = {"wan": _wan, "ltx2": _ltx2, "diffusers": _generic}[spec.family]
    adapter, denoisers, encoders = build(spec, runtime, profile, parts, device=device, dtype=dtype, variants=variants)
    return RandomModel(adapter, profile, denoisers, encoders, size, device, recipes)


def _lora_rank(weight_name: str, default: int) -> int:
    found = re.search(r"rank(\d+)", weight_name)
    return int(found.group(1)) if found else default


def _variant_loras(pipe: Any, spec: ModelSpec, variants: list[tuple[str, str]]) -> None:
    """What ``load_variant_loras`` does with the LoRA files: each variant's adapter on its denoiser(s), off."""
    added = False
    for mode, name in variants:
        lora = spec.modes[mode].variants[name].lora
        if lora is None:
            continue
        rank = _lora_rank(lora.weight_name, WAN_LORA_RANK)
        add_random_lora(pipe.transformer, lora_adapter_name(mode, name), rank)
        if lora.weight_name_2 is not None:
            add_random_lora(pipe.transformer_2, lora_adapter_name(mode, name), rank)
        added = True
    if added:
        pipe.disable_lora()


def _wan(
    spec: ModelSpec,
    runtime: ModelRuntimeSettings,
    profile: RuntimeProfile,
    parts: dict[str, Any],
    *,
    device: str,
    dtype: str,
    variants: list[tuple[str, str]],
) -> tuple[Any, list[str], list[str]]:
    from diffusers import UniPCMultistepScheduler, WanPipeline
    from transformers import ByT5Tokenizer

    from pipelines.families.wan import WanTextToVideo

    tokenizer = ByT5Tokenizer()
    tokenizer.model_max_length = 512
    # The Wan checkpoints' scheduler; the adapter rebuilds it with each variant's flow_shift.
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    two = "transformer_2" in parts
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=parts["text_encoder"],
        vae=parts["vae"],
        scheduler=scheduler,
        transformer=parts["transformer"],
        transformer_2=parts.get("transformer_2"),
        boundary_ratio=0.875 if two else None,  # Wan2.2-T2V-A14B-Diffusers model_index.json
    )
    _variant_loras(pipe, spec, variants)
    denoisers = ["transformer", "transformer_2"] if two else ["transformer"]
    apply_profile(pipe, profile, device, denoisers=denoisers)
    adapter = WanTextToVideo(spec, runtime, pipe, device=device, dtype=dtype, profile=profile)
    return adapter, denoisers, ["text_encoder"]


def _ltx2(
    spec: ModelSpec,
    runtime: ModelRuntimeSettings,
    profile: RuntimeProfile,
    parts: dict[str, Any],
    *,
    device: str,
    dtype: str,
    variants: list[tuple[str, str]],
) -> tuple[Any, list[str], list[str]]:
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2LatentUpsamplePipeline, LTX2Pipeline

    from pipelines.families.ltx2 import LORA_ADAPTER, LTX2TextToVideo
    from pipelines.tiny.generic import byte_chat_tokenizer

    pipe = LTX2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=parts["vae"],
        audio_vae=parts["audio_vae"],
        text_encoder=parts["text_encoder"],
        tokenizer=byte_chat_tokenizer(max_length=8192),
        connectors=parts["connectors"],
        transformer=parts["transformer"],
        vocoder=parts["vocoder"],
    )
    upsample_pipe = None
    if spec.two_stage is not None:  # as LTX2TextToVideo._load_two_stage: the refinement LoRA, loaded off
        add_random_lora(pipe.transformer, LORA_ADAPTER, LORA_RANK)
        pipe.set_adapters([LORA_ADAPTER], [spec.two_stage.lora_scale])
        pipe.disable_lora()
        upsample_pipe = LTX2LatentUpsamplePipeline(vae=pipe.vae, latent_upsampler=parts["latent_upsampler"])
        upsample_pipe.set_progress_bar_config(disable=True)
    apply_profile(pipe, profile, device, denoisers=["transformer"])
    adapter = LTX2TextToVideo(
        spec, runtime, pipe, device=device, dtype=dtype, profile=profile, upsample_pipe=upsample_pipe
    )
    return adapter, ["transformer"], ["text_encoder", "connectors"]


def _generic(
    spec: ModelSpec,
    runtime: ModelRuntimeSettings,
    profile: RuntimeProfile,
    parts: dict[str, Any],
    *,
    device: str,
    dtype: str,
    variants: list[tuple[str, str]],
) -> tuple[Any, list[str], list[str]]:
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.guiders import ClassifierFreeGuidance
    from transformers import ByT5Tokenizer

    from pipelines.families.generic import DiffusersTextToVideo, pipeline_class
    from pipelines.tiny.generic import byte_chat_tokenizer

    assert spec.diffusers is not None
    if spec.diffusers.pipeline != "HunyuanVideo15Pipeline":
        raise SystemExit(f"{spec.id}: random weights are assembled for HunyuanVideo15Pipeline only")
    tokenizer_2 = ByT5Tokenizer()
    tokenizer_2.model_max_length = 512
    pipe = pipeline_class(spec.diffusers.pipeline)(
        text_encoder=parts["text_encoder"],
        tokenizer=byte_chat_tokenizer(),
        transformer=parts["transformer"],
        vae=parts["vae"],
        scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0),  # the 480p checkpoints' shift
        text_encoder_2=parts["text_encoder_2"],
        tokenizer_2=tokenizer_2,
        guider=ClassifierFreeGuidance(guidance_scale=6.0),
    )
    apply_profile(pipe, profile, device, denoisers=spec.diffusers.denoisers)
    adapter = DiffusersTextToVideo(spec, runtime, pipe, device=device, profile=profile)
    return adapter, list(spec.diffusers.denoisers), ["text_encoder", "text_encoder_2"]

"""A catalog model's production adapter over a pipeline of random full-size components.

For measuring where no checkpoint is at hand: the GPU bench (``scripts/bench_gpu.py --random-weights``) and the
full-size simulation on CPU (``pipelines.simulation.simulate``). Each family adapter's ``load`` is
``from_pretrained`` + the adapter's ``assemble`` (``pipelines.runtime.diffusers_adapter``: variant LoRAs, the family's
``prepare``, the runtime profile, the constructor, the family's ``attach``: LTX-2's upsampler and two-stage setup,
HunyuanVideo 1.5's attention processor). Here the diffusers pipeline is built
from ``pipelines.planning.random_weights`` components instead of read from a checkpoint, and the same
``assemble`` takes it: only the LoRA source differs (random LoRAs of the published ranks, made where the model
lives, stand in for the files). Every ``denoise`` and ``decode`` afterwards is the production code.

What a checkpoint would bring and no architecture config holds is made here: tokenizers (byte-level ones
built in code, as the tiny models use: prompts are padded to the family's fixed text length either way, so
the text encoders see the real token counts), the image processors (CLIP's defaults are Wan's checkpoint's; SigLIP's
at its encoder's image size, as FLUX.1-Redux-dev's, for HunyuanVideo 1.5 I2V) and
schedulers (the classes the checkpoints ship; each variant's shift is applied by the adapter as in production).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from foundation.settings.models import ModelRuntimeSettings
from pipelines.planning.random_weights import add_random_lora, arch_entries, build_random, shrink
from pipelines.runtime.lora import lora_adapter_name
from pipelines.runtime.profile import quiet_progress_bars, runtime_profile

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec, RuntimeProfile
    from pipelines.runtime.lora import LoraSource

__all__ = ["RandomModel", "random_adapter", "random_variant_loras"]

WAN_LORA_RANK = 64  # lightx2v's step-distillation LoRAs (..._lora_rank64_lightx2v_4step...)
# The text encoders of each family (what the prompt encode phase runs), by family.
TEXT_ENCODERS = {"wan": ["text_encoder"], "ltx2": ["text_encoder", "connectors"]}


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


def random_adapter(  # the bench and the simulation pass each keyword by name
    spec: ModelSpec,
    *,
    device: str,
    variants: list[tuple[str, str]],
    scale: str = "full",
    seed: int = 0,
    offload: str = "none",
    fake: bool = False,
) -> RandomModel:
    """``spec``'s adapter over random components from ``configs/arch/<id>/``, under its runtime profile with
    ``offload`` in place of the profile's, with random LoRAs for the ``(mode, variant)`` pairs that have one.
    ``scale``: ``full``, ``tiny`` (the tiny widths of ``shrink``) or ``shallow`` (real widths, a few blocks); the
    last two in float32, as a CPU worker runs (bf16 matmuls on a CPU are slow). ``fake``: every parameter and
    LoRA layer a fake tensor (``pipelines.simulation.simulate``)."""
    quiet_progress_bars()
    runtime = ModelRuntimeSettings(device=device, profile_overrides={spec.id: {"offload": offload}})
    profile = runtime_profile(spec, runtime)
    entries = arch_entries(spec.id)
    if not entries:
        raise ValueError(f"{spec.id}: no architecture config under configs/arch/{spec.id}/")
    entries = entries if scale == "full" else shrink(entries, widths=scale == "tiny")
    dtype = spec.dtype if scale == "full" else "float32"
    recipes: dict[str, tuple[dict[str, Any], str, int]] = {
        name: (entry, profile.dtypes.get(name, dtype), seed + i) for i, (name, entry) in enumerate(entries.items())
    }
    parts = {name: build_random(e, device=device, dtype=d, seed=s, fake=fake) for name, (e, d, s) in recipes.items()}
    size = sum(t.numel() * t.element_size() for m in parts.values() for t in _tensors(m))
    built = _assemble(spec, runtime, profile, parts, device=device, dtype=dtype, variants=variants, fake=fake)
    adapter, denoisers, encoders = built
    return RandomModel(adapter, profile, denoisers, encoders, size, device, recipes)


def _tensors(module: Any) -> list[Any]:
    """Parameters and buffers, each once (tied ones too)."""
    seen: dict[int, Any] = {}
    for tensor in [*module.parameters(), *module.buffers()]:
        seen.setdefault(id(tensor), tensor)
    return list(seen.values())


def _assemble(
    spec: ModelSpec,
    runtime: ModelRuntimeSettings,
    profile: RuntimeProfile,
    parts: dict[str, Any],
    *,
    device: str,
    dtype: str,
    variants: list[tuple[str, str]],
    fake: bool,
) -> tuple[Any, list[str], list[str]]:
    """The random pipeline of ``spec``'s family, then its adapter's own ``assemble``: (adapter, denoisers, encoders)."""
    if spec.family == "wan":
        from pipelines.runtime.registry import adapter_class

        pipe = _wan_pipeline(spec, parts)
        cls: Any = adapter_class(spec.adapter)
        loras = random_variant_loras(spec, variants, fake=fake)
        adapter = cls.assemble(spec, runtime, pipe, device=device, dtype=dtype, profile=profile, loras=loras)
        denoisers: list[str] = [n for n in ("transformer", "transformer_2") if n in parts]
        return adapter, denoisers, TEXT_ENCODERS["wan"]
    if spec.family == "ltx2":
        from pipelines.families.ltx2 import LORA_ADAPTER, LTX2TextToVideo

        pipe = _ltx2_pipeline(parts)
        lora, extra = None, {}
        if spec.two_stage is not None:
            extra = {"latent_upsampler": parts["latent_upsampler"]}
            if spec.two_stage.distilled_lora is not None:  # the distilled LoRA at its published rank, not its file
                lora = _random_lora(LORA_ADAPTER, spec.two_stage.lora_rank, fake=fake)
        if spec.diffusion_decoder is not None:
            extra["diffusion_decoder"] = parts["diffusion_decoder"]
        adapter = LTX2TextToVideo.assemble(
            spec, runtime, pipe, device=device, dtype=dtype, profile=profile, loras=lora, parts=extra
        )
        return adapter, ["transformer"], TEXT_ENCODERS["ltx2"]
    from pipelines.families.generic import DiffusersTextToVideo

    assert spec.diffusers is not None
    pipe = _generic_pipeline(spec, parts)
    adapter = DiffusersTextToVideo.assemble(spec, runtime, pipe, device=device, dtype=dtype, profile=profile)
    encoders: list[str] = [n for n in ("text_encoder", "text_encoder_2", "image_encoder") if n in parts]
    return adapter, list(spec.diffusers.denoisers), encoders


def _lora_rank(weight_name: str, default: int) -> int:
    found = re.search(r"rank(\d+)", weight_name)
    return int(found.group(1)) if found else default


def random_variant_loras(spec: ModelSpec, variants: list[tuple[str, str]], *, fake: bool = False) -> LoraSource:
    """The random ``LoraSource``: what ``load_variant_loras`` does with the LoRA files, for the ``(mode,
    variant)`` pairs given: each variant's adapter, at the rank its file name states, on its denoiser(s), off."""

    def load(pipe: Any) -> None:
        added = False
        for mode, name in variants:
            lora = spec.modes[mode].variants[name].lora
            if lora is None:
                continue
            rank = _lora_rank(lora.weight_name, WAN_LORA_RANK)
            add_random_lora(pipe.transformer, lora_adapter_name(mode, name), rank, fake=fake)
            if lora.weight_name_2 is not None:
                add_random_lora(pipe.transformer_2, lora_adapter_name(mode, name), rank, fake=fake)
            added = True
        if added:
            pipe.disable_lora()

    return load


def _random_lora(adapter_name: str, rank: int, *, fake: bool) -> LoraSource:
    def load(pipe: Any) -> None:
        add_random_lora(pipe.transformer, adapter_name, rank, fake=fake)

    return load


def _byte_tokenizer(max_length: int) -> Any:
    from transformers import ByT5Tokenizer

    tokenizer = ByT5Tokenizer()
    tokenizer.model_max_length = max_length
    return tokenizer


def _wan_pipeline(spec: ModelSpec, parts: dict[str, Any]) -> Any:
    """``WanPipeline``, or ``WanImageToVideoPipeline`` for the image-to-video adapter, over ``parts``."""
    from diffusers import UniPCMultistepScheduler, WanImageToVideoPipeline, WanPipeline

    # The Wan checkpoints' scheduler; the adapter rebuilds it with each variant's flow_shift.
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    two = "transformer_2" in parts
    common = {
        "tokenizer": _byte_tokenizer(512),
        "text_encoder": parts["text_encoder"],
        "vae": parts["vae"],
        "scheduler": scheduler,
        "transformer": parts["transformer"],
        "transformer_2": parts.get("transformer_2"),
        "boundary_ratio": 0.875 if two else None,  # the A14B checkpoints' model_index.json; variants set theirs
    }
    if not spec.adapter.endswith(":WanImageToVideo"):
        return WanPipeline(**common)
    image = {}
    if "image_encoder" in parts:  # Wan 2.1 I2V: CLIP ViT-H/14 at 224, the processor's defaults
        from transformers import CLIPImageProcessor

        image = {"image_encoder": parts["image_encoder"], "image_processor": CLIPImageProcessor()}
    # TI2V-5B (the 48-channel VAE) holds the image latent as frame 0 (model_index.json: expand_timesteps).
    expand = parts["vae"].config.z_dim == 48
    return WanImageToVideoPipeline(**common, **image, expand_timesteps=expand)


def _ltx2_pipeline(parts: dict[str, Any]) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline

    from pipelines.tiny.generic import byte_chat_tokenizer

    return LTX2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=parts["vae"],
        audio_vae=parts["audio_vae"],
        text_encoder=parts["text_encoder"],
        tokenizer=byte_chat_tokenizer(max_length=8192),
        connectors=parts["connectors"],
        transformer=parts["transformer"],
        vocoder=parts["vocoder"],
    )


def _generic_pipeline(spec: ModelSpec, parts: dict[str, Any]) -> Any:
    """HunyuanVideo 1.5 (either mode) or SkyReels-V2 over ``parts``, as their checkpoints' model_index.json assemble
    them."""
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler
    from diffusers.guiders import ClassifierFreeGuidance

    from pipelines.families.generic import pipeline_class
    from pipelines.tiny.generic import byte_chat_tokenizer

    assert spec.diffusers is not None
    name = spec.diffusers.pipeline
    cls = pipeline_class(name)
    if name == "SkyReelsV2Pipeline":
        return cls(
            tokenizer=_byte_tokenizer(512),
            text_encoder=parts["text_encoder"],
            transformer=parts["transformer"],
            vae=parts["vae"],
            scheduler=UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=8.0),
        )
    if name not in {"HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline"}:
        raise ValueError(f"{spec.id}: random weights are assembled for HunyuanVideo 1.5 and SkyReels-V2 only")
    image = {}
    if "image_encoder" in parts:  # the I2V checkpoints: SigLIP so400m (FLUX.1-Redux-dev's preprocessor, at its size)
        from transformers import SiglipImageProcessorPil

        side = parts["image_encoder"].config.image_size
        processor = SiglipImageProcessorPil(size={"height": side, "width": side})
        image = {"image_encoder": parts["image_encoder"], "feature_extractor": processor}
    return cls(
        text_encoder=parts["text_encoder"],
        tokenizer=byte_chat_tokenizer(),
        transformer=parts["transformer"],
        vae=parts["vae"],
        scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0),  # the 480p checkpoints' shift
        text_encoder_2=parts["text_encoder_2"],
        tokenizer_2=_byte_tokenizer(512),
        guider=ClassifierFreeGuidance(guidance_scale=6.0),
        **image,
    )

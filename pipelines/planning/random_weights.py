"""Catalog models at full size with random weights, from their architecture configs (``configs/arch/``).

For measuring speed and memory where no checkpoint is at hand (``scripts/bench_gpu.py --random-weights``):
each component is built from its config with its parameters on the meta device (its buffers, such as RoPE
tables, are computed as the class computes them), then every parameter is allocated directly on the target
device at the dtype a checkpoint load would give it, and filled there with a cheap random draw. Nothing of a
14 B model is initialised on the host, and a build is as deterministic as the device's generator.

The draw keeps activations in range through every block: matrices ~ N(0, 1/fan_in) (variance preserving),
vectors named ``bias`` zero, other vectors one (norm scales). The numbers mean nothing; the shapes, dtypes,
kernels and memory are the real model's.

``shrink`` gives the same architectures at tiny widths and depths (the widths of the tiny CPU models, the
couplings between components kept: text widths, latent channels), so the whole path runs on a CPU in tests.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.planning.memory_plan import _class, _fp32_kept, arch_dir

if TYPE_CHECKING:
    import torch

__all__ = ["SHALLOW", "TINY", "add_random_lora", "arch_entries", "build_random", "lora_targets", "shrink"]

# Tiny widths per component class, for ``shrink``: the values of the tiny CPU models (pipelines/tiny), which keep
# the couplings between components (UMT5 d_model 32 = Wan text_dim; Gemma hidden 32 = LTX-2 caption channels,
# 2 layers + 1 = the connectors' projection factor; Qwen hidden 16 and byT5 d_model 32 = HunyuanVideo 1.5's text
# widths; VAE latent channels = the transformers' input channels). Keys not named keep the real config's value.
TINY: dict[str, dict[str, Any]] = {
    "WanTransformer3DModel": {
        "num_layers": 2,
        "num_attention_heads": 2,
        "attention_head_dim": 12,
        "ffn_dim": 32,
        "text_dim": 32,
    },
    "UMT5EncoderModel": {
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 32,
    },
    "AutoencoderKLWan": {"base_dim": 3, "dim_mult": [1, 1, 1, 1], "num_res_blocks": 1},
    "LTX2VideoTransformer3DModel": {
        "in_channels": 8,
        "out_channels": 8,
        "num_attention_heads": 2,
        "attention_head_dim": 8,
        "cross_attention_dim": 16,
        "audio_in_channels": 4,
        "audio_out_channels": 4,
        "audio_num_attention_heads": 2,
        "audio_attention_head_dim": 4,
        "audio_cross_attention_dim": 8,
        "num_layers": 2,
        "caption_channels": 32,
    },
    "diffusers.pipelines.ltx2.LTX2TextConnectors": {
        "caption_channels": 32,
        "text_proj_in_factor": 3,
        "video_connector_num_attention_heads": 4,
        "video_connector_attention_head_dim": 8,
        "video_connector_num_layers": 1,
        "video_connector_num_learnable_registers": None,
        "audio_connector_num_attention_heads": 4,
        "audio_connector_attention_head_dim": 8,
        "audio_connector_num_layers": 1,
        "audio_connector_num_learnable_registers": None,
        "connector_rope_base_seq_len": 32,
        "video_hidden_dim": 16,
        "audio_hidden_dim": 8,
    },
    "AutoencoderKLLTX2Video": {
        "latent_channels": 8,
        "block_out_channels": [8, 16, 32, 32],
        "decoder_block_out_channels": [8, 16, 32],
        "layers_per_block": [1, 1, 1, 1, 1],
        "decoder_layers_per_block": [1, 1, 1, 1],
    },
    "AutoencoderKLLTX2Audio": {
        "base_channels": 4,
        "ch_mult": [1],
        "num_res_blocks": 1,
        "resolution": 32,
        "latent_channels": 2,
        "mel_bins": 8,
    },
    "diffusers.pipelines.ltx2.vocoder.LTX2Vocoder": {
        "in_channels": 16,  # audio VAE output channels (2) x mel bins (8)
        "hidden_channels": 32,
        "resnet_kernel_sizes": [3],
        "resnet_dilations": [[1, 3, 5]],
    },
    "diffusers.pipelines.ltx2.latent_upsampler.LTX2LatentUpsamplerModel": {
        "in_channels": 8,
        "mid_channels": 32,
        "num_blocks_per_stage": 1,
    },
    "Gemma3ForConditionalGeneration": {
        # A small vocabulary: LTX2Pipeline runs the whole model, so its head's logits (tokens x vocabulary) are
        # computed too: at the real 262,208 entries that alone would be most of a CPU run.
        "boi_token_index": 1000,
        "eoi_token_index": 1001,
        "image_token_index": 1002,
        "text_config": {
            "vocab_size": 1024,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "sliding_window": 64,
            "query_pre_attn_scalar": 16,
        },
        "vision_config": {
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
        },
        "mm_tokens_per_image": 4,
    },
    "HunyuanVideo15Transformer3DModel": {
        "in_channels": 9,  # 2 x latent channels + 1
        "out_channels": 4,
        "num_attention_heads": 2,
        "attention_head_dim": 8,
        "num_layers": 1,
        "num_refiner_layers": 1,
        "mlp_ratio": 2.0,
        "text_embed_dim": 16,
        "text_embed_2_dim": 32,
        "image_embed_dim": 12,
        "rope_axes_dim": [2, 2, 4],
        "target_size": 16,
    },
    "AutoencoderKLHunyuanVideo15": {
        "latent_channels": 4,
        "block_out_channels": [4, 4, 8, 8, 8],
        "layers_per_block": 1,
        "downsample_match_channel": False,
        "upsample_match_channel": False,
    },
    "Qwen2_5_VLTextModel": {
        "hidden_size": 16,
        "intermediate_size": 16,
        "num_hidden_layers": 3,  # HunyuanVideo15Pipeline reads hidden_states[-3]
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "rope_scaling": {"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
    },
    "T5EncoderModel": {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 2},
}


def arch_entries(model_id: str, root: Path | None = None) -> dict[str, dict[str, Any]]:
    """The model's components as ``configs/arch/<model_id>/`` declares them (the chat LLM left out: it is not
    part of the pipeline), by component name; empty when the model ships no arch config."""
    folder = (root or arch_dir()) / model_id
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in files if p.stem != "prompt_llm"}


# Depth keys per component class for ``shrink(..., widths=False)``: the real widths at a few blocks.
SHALLOW: dict[str, dict[str, Any]] = {
    "WanTransformer3DModel": {"num_layers": 1},
    "LTX2VideoTransformer3DModel": {"num_layers": 1},
    "HunyuanVideo15Transformer3DModel": {"num_layers": 1},
    "UMT5EncoderModel": {"num_layers": 1},
    "T5EncoderModel": {"num_layers": 1},
    "Qwen2_5_VLTextModel": {"num_hidden_layers": 3},  # HunyuanVideo15Pipeline reads hidden_states[-3]
    "Gemma3ForConditionalGeneration": {  # the small vocabulary of TINY: 4 GB less, no width changed
        **{
            k: TINY["Gemma3ForConditionalGeneration"][k]
            for k in ("boi_token_index", "eoi_token_index", "image_token_index")
        },
        "text_config": {"num_hidden_layers": 2, "vocab_size": 1024},
        "vision_config": {"num_hidden_layers": 1},
    },
    "diffusers.pipelines.ltx2.LTX2TextConnectors": {"text_proj_in_factor": 3},  # every Gemma hidden state: 2 + 1
}


def shrink(entries: dict[str, dict[str, Any]], *, widths: bool = True) -> dict[str, dict[str, Any]]:
    """The same components at the tiny widths and depths of ``TINY`` (nested configs merged key by key), or
    with ``widths=False`` at their real widths with a few blocks (``SHALLOW``; VAEs whole): a check of the
    full-size configs that fits a CPU's memory."""
    table = TINY if widths else SHALLOW
    out = {}
    for name, entry in entries.items():
        shrunk = copy.deepcopy(entry)
        shrunk["config"] = _merged(shrunk["config"], table.get(entry["class"], {}))
        out[name] = shrunk
    return out


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and "rope" not in key:
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def build_random(entry: dict[str, Any], *, device: str, dtype: str, seed: int, fake: bool = False) -> torch.nn.Module:
    """The component ``entry`` describes, with random weights allocated on ``device``: parameters at ``dtype``
    (those the class keeps in float32, as a checkpoint load keeps them), buffers as the class built them.
    ``fake``: the parameters are fake tensors (``pipelines.planning.fake_runtime``); the buffers stay real, as
    the class computed them (some constructors read their own tables' values)."""
    import torch
    from accelerate import init_empty_weights

    from pipelines.planning.fake_runtime import fake_mode

    cls = _class(entry["library"], entry["class"])
    with init_empty_weights(include_buffers=False):  # parameters on meta; buffers computed for real
        if entry["library"] == "diffusers":
            module = cls.from_config(entry["config"])
        else:
            import transformers

            config = dict(entry["config"])
            module = cls(transformers.AutoConfig.for_model(config.pop("model_type"), **config))
    if entry["library"] != "diffusers":
        # Built under ``init_empty_weights`` a transformers model leaves its shared embeddings untied (UMT5's
        # ``shared``/``encoder.embed_tokens``, Gemma-3's input embedding and head: 1 B parameters each), and tying
        # inside it re-creates each parameter; a checkpoint load ties them, so tie them here, outside it.
        module.tie_weights()
    keep = _fp32_kept(module, dtype, entry["library"])
    generator = torch.Generator(device).manual_seed(seed)
    target = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    with fake_mode() if fake else contextlib.nullcontext():
        _fill(module, keep, target, device, generator)
    built: torch.nn.Module = module.eval().requires_grad_(False)
    return built


def _fill(
    module: torch.nn.Module, keep: tuple[str, ...], target: torch.dtype, device: str, generator: torch.Generator
) -> None:
    import torch

    made: dict[int, torch.nn.Parameter] = {}  # tied parameters stay tied
    for module_name, child in module.named_modules():
        kept = any(k in module_name.split(".") for k in keep)
        for name, param in list(child._parameters.items()):
            if param is None:
                continue
            if id(param) not in made:
                made[id(param)] = torch.nn.Parameter(
                    _draw(name, param, torch.float32 if kept else target, device, generator), requires_grad=False
                )
            child._parameters[name] = made[id(param)]
        for name, buffer in list(child._buffers.items()):
            if buffer is not None:
                child._buffers[name] = buffer.to(device)


def _draw(name: str, param: torch.Tensor, dtype: torch.dtype, device: str, generator: torch.Generator) -> torch.Tensor:
    import torch

    tensor = torch.empty(param.shape, dtype=dtype if param.is_floating_point() else param.dtype, device=device)
    if not tensor.is_floating_point():
        return tensor.zero_()
    if tensor.ndim >= 2:
        fan_in = tensor[0].numel()
        return tensor.normal_(0.0, fan_in**-0.5, generator=generator)
    return tensor.zero_() if name.endswith("bias") else tensor.fill_(1.0)


def lora_targets(model: torch.nn.Module) -> list[str]:
    """Every ``Linear`` inside the repeated blocks: what the published step-distillation LoRAs adapt (attention
    and feed-forward projections of each block), for ``add_random_lora``."""
    import torch

    blocks = re.compile(r"^(transformer_blocks|blocks|single_transformer_blocks)\.\d+\.")
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and blocks.match(n)]


def add_random_lora(model: Any, adapter_name: str, rank: int, *, fake: bool = False) -> None:
    """A rank-``rank`` LoRA on ``lora_targets(model)`` under ``adapter_name`` (peft's initialisation: the update
    starts at zero, so outputs do not move; its matmuls cost what a published LoRA's do, unfused); ``fake``: its
    layers are fake tensors like a fake model's."""
    import torch
    from peft import LoraConfig

    from pipelines.planning.fake_runtime import fake_mode

    # Made where the model lives: LTX-2's rank-384 LoRA is 3.7 B values, never to be initialised on the host
    # (peft creates its layers on the default device, then moves them to the base layer's). Under a fake-tensor
    # mode the layers are fake like the model's.
    device = next(model.parameters()).device
    with torch.device(device), fake_mode() if fake else contextlib.nullcontext():
        model.add_adapter(
            LoraConfig(r=rank, lora_alpha=rank, target_modules=lora_targets(model)), adapter_name=adapter_name
        )

"""Pieces every tiny-model builder shares (``pipelines.tiny.builders``, ``.wan``, ``.i2v``, ``.generic``): the seeding
that makes a build repeatable, the Wan parts (a byte-level tokenizer and a two-layer UMT5, the transformer, the
Wan 2.1 VAE and the UniPC scheduler the checkpoints ship) and random Wan LoRA files in diffusers' format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "TINY_EXPERT_LORAS",
    "TINY_TEXT_DIM",
    "TINY_WAN_LORA",
    "save_tiny_wan_lora",
    "seeded",
    "tiny_umt5",
    "tiny_unipc",
    "tiny_wan21_vae",
    "tiny_wan_transformer",
]

# Width of the tiny UMT5's output: the tiny Wan transformers' ``text_dim``.
TINY_TEXT_DIM = 32


def seeded(seed: int) -> None:
    """Seed torch before building a module, so every build of a tiny model has the same weights."""
    import torch

    torch.manual_seed(seed)


def tiny_umt5(seed: int) -> tuple[Any, Any]:
    """``ByT5Tokenizer`` (no vocab files: 256 bytes + 3 specials + 125 extra ids = 384 tokens) and a
    two-layer ``UMT5EncoderModel`` of width ``TINY_TEXT_DIM``, its weights drawn after ``seeded(seed)``."""
    from transformers import ByT5Tokenizer, UMT5Config, UMT5EncoderModel

    tokenizer = ByT5Tokenizer()
    tokenizer.model_max_length = 512
    seeded(seed)
    encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=len(tokenizer),
            d_model=TINY_TEXT_DIM,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=32,
            dropout_rate=0.0,
            feed_forward_proj="gated-gelu",
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=0,
        )
    ).eval()
    return tokenizer, encoder


def tiny_wan_transformer(
    seed: int, *, channels_in: int = 16, channels_out: int = 16, image_dim: int | None = None
) -> Any:
    """A two-block ``WanTransformer3DModel`` (diffusers' Wan test config, ``text_dim`` = the tiny UMT5's width)."""
    from diffusers import WanTransformer3DModel

    seeded(seed)
    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=channels_in,
        out_channels=channels_out,
        text_dim=TINY_TEXT_DIM,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        image_dim=image_dim,
        # The RoPE table caps H/16, W/16 and latent frames; its buffers are not saved, so 1024 is free.
        rope_max_seq_len=1024,
    )


def tiny_wan21_vae(seed: int) -> Any:
    """The Wan 2.1 VAE layout (8x spatial, 4x temporal) with 3 base channels. z_dim stays 16: the pipeline reshapes
    the (16-entry) latents_mean/std with view(1, z_dim, ...)."""
    from diffusers import AutoencoderKLWan

    seeded(seed)
    return AutoencoderKLWan(
        base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    )


def tiny_unipc() -> Any:
    """What the real Wan checkpoints ship; the adapters rebuild it with each variant's shift and sampler."""
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0, num_train_timesteps=1000
    )


# The step-distillation-style LoRA file of tiny-wan and tiny-wan-i2v (random, for variants with a ``lora``).
TINY_WAN_LORA = "tiny-step-lora.safetensors"
# The two-expert models' LoRA files: (high-noise ``transformer``, low-noise ``transformer_2``), as lightx2v ships
# Wan 2.2's (a catalog ``lora.weight_name_2``).
TINY_EXPERT_LORAS = ("tiny-step-lora-high.safetensors", "tiny-step-lora-low.safetensors")


def save_tiny_wan_lora(out: Path, transformer: Any, weight_name: str, seed: int) -> None:
    """Save a random rank-4 LoRA for a tiny Wan ``transformer`` as ``out/weight_name`` (diffusers' Wan LoRA
    format, what ``load_lora_weights`` reads). B is random too (peft would start it at zero), so switching the
    LoRA on changes the output. Adds the adapter to ``transformer``: call after the model is saved."""
    from diffusers import WanPipeline
    from peft import LoraConfig, get_peft_model_state_dict

    seeded(seed)
    targets = ["to_q", "to_k", "to_v", "to_out.0"]
    transformer.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights=False, target_modules=targets))
    layers = get_peft_model_state_dict(transformer)
    WanPipeline.save_lora_weights(out, transformer_lora_layers=layers, weight_name=weight_name)

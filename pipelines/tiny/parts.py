"""Pieces every tiny-model builder shares (``pipelines.tiny.builders``, ``tiny_i2v``, ``tiny_generic``): the seeding
that makes a build repeatable, the Wan text side (a byte-level tokenizer and a two-layer UMT5) and random
Wan LoRA files in diffusers' format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["TINY_TEXT_DIM", "TINY_WAN_LORA", "save_tiny_wan_lora", "seeded", "tiny_umt5"]

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


# The step-distillation-style LoRA file of tiny-wan and tiny-wan-i2v (random, for variants with a ``lora``).
TINY_WAN_LORA = "tiny-step-lora.safetensors"


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

"""Tiny random-weight Wan text-to-video models, built offline like the others in ``pipelines.tiny.builders``.

- ``tiny-wan``: the Wan 2.1 T2V layout (``WanPipeline``: one transformer, UMT5 with a byte-level tokenizer, the
  Wan 2.1 VAE, UniPC) and a random step-distillation-style LoRA for its ``distilled`` variant;
- ``tiny-wan-a14b``: the Wan 2.2 T2V A14B layout: two experts of the same shape, ``transformer`` (high noise)
  and ``transformer_2`` (low noise), switching at ``boundary_ratio`` 0.875 (wan/configs/wan_t2v_A14B.py), and
  one random LoRA per expert, as lightx2v ships Wan 2.2's distillation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pipelines.tiny.parts import (
    TINY_EXPERT_LORAS,
    TINY_WAN_LORA,
    save_tiny_wan_lora,
    tiny_umt5,
    tiny_unipc,
    tiny_wan21_vae,
    tiny_wan_transformer,
)

__all__ = ["WAN_BUILDERS"]


def _build_wan(out: Path) -> None:
    from diffusers import WanPipeline

    tokenizer, text_encoder = tiny_umt5(0)
    transformer = tiny_wan_transformer(1)
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=tiny_wan21_vae(2),
        scheduler=tiny_unipc(),
        transformer=transformer,
    )
    pipe.save_pretrained(out)
    save_tiny_wan_lora(out, transformer, TINY_WAN_LORA, seed=18)  # for variants with a ``lora``


def _build_wan_a14b(out: Path) -> None:
    from diffusers import WanPipeline

    tokenizer, text_encoder = tiny_umt5(0)
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=tiny_wan21_vae(2),
        scheduler=tiny_unipc(),
        transformer=tiny_wan_transformer(50),
        transformer_2=tiny_wan_transformer(51),
        boundary_ratio=0.875,
    )
    pipe.save_pretrained(out)
    save_tiny_wan_lora(out, pipe.transformer, TINY_EXPERT_LORAS[0], seed=52)
    save_tiny_wan_lora(out, pipe.transformer_2, TINY_EXPERT_LORAS[1], seed=53)


WAN_BUILDERS: dict[str, Callable[[Path], None]] = {"tiny-wan": _build_wan, "tiny-wan-a14b": _build_wan_a14b}

"""Tiny random-weight image-to-video models, built offline like the others in ``pipelines.tiny.builders``.

- ``tiny-wan-i2v``: the Wan 2.1 I2V layout: ``WanImageToVideoPipeline`` with a CLIP image encoder
  (``CLIPVisionModel``, the class the real checkpoint ships, + ``CLIPImageProcessorPil``) and a transformer
  that takes 36 input channels (16 noise + 4 mask + 16 image-condition latents) and ``image_dim`` image tokens;
- ``tiny-wan-i2v-a14b``: the Wan 2.2 I2V A14B layout: two experts (``transformer``/``transformer_2``) with
  the same 36 channels, no image encoder, ``boundary_ratio`` 0.9;
- ``tiny-wan-ti2v``: the Wan 2.2 TI2V 5B layout: ``WanPipeline`` with ``expand_timesteps`` and its own VAE
  (z_dim 48, residual, 2x2 patchified input: 16x spatial), so generation sizes are multiples of 32.

LTX-2 image-to-video needs no model of its own: ``LTX2ImageToVideoPipeline`` takes the very components of
``tiny-ltx2``. The text side (UMT5 + ByT5 tokenizer) is built exactly as ``tiny-wan``'s.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.tiny.parts import (
    TINY_EXPERT_LORAS,
    TINY_WAN_LORA,
    save_tiny_wan_lora,
    seeded,
    tiny_umt5,
    tiny_unipc,
    tiny_wan21_vae,
    tiny_wan_transformer,
)

__all__ = ["I2V_BUILDERS"]


def _build_wan_i2v(out: Path) -> None:
    from diffusers import WanImageToVideoPipeline
    from transformers import CLIPImageProcessorPil, CLIPVisionConfig, CLIPVisionModel

    tokenizer, text_encoder = tiny_umt5(0)
    seeded(31)
    # The real encoder is CLIP ViT-H/14 (hidden 1280, 224 px); the pipeline feeds hidden_states[-2] to the
    # transformer's image projection, so image_dim = hidden_size.
    image_encoder = CLIPVisionModel(
        CLIPVisionConfig(
            hidden_size=8,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=16,
            image_size=32,
            patch_size=8,
        )
    ).eval()
    image_processor = CLIPImageProcessorPil(crop_size={"height": 32, "width": 32}, size={"shortest_edge": 32})
    transformer = tiny_wan_transformer(32, channels_in=36, channels_out=16, image_dim=8)
    pipe = WanImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=tiny_wan21_vae(2),
        scheduler=tiny_unipc(),
        image_processor=image_processor,
        image_encoder=image_encoder,
        transformer=transformer,
    )
    pipe.save_pretrained(out)
    # A step-distillation-style LoRA, as lightx2v ships Wan 2.1 I2V's (the catalog's ``distilled`` variant).
    save_tiny_wan_lora(out, transformer, TINY_WAN_LORA, seed=37)


def _build_wan_i2v_a14b(out: Path) -> None:
    from diffusers import WanImageToVideoPipeline

    tokenizer, text_encoder = tiny_umt5(0)
    pipe = WanImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=tiny_wan21_vae(2),
        scheduler=tiny_unipc(),
        transformer=tiny_wan_transformer(33, channels_in=36, channels_out=16),
        transformer_2=tiny_wan_transformer(34, channels_in=36, channels_out=16),
        boundary_ratio=0.9,  # Wan2.2-I2V-A14B's boundary (wan/configs/wan_i2v_A14B.py)
    )
    pipe.save_pretrained(out)
    # One step-distillation-style LoRA per expert, as lightx2v ships Wan 2.2's.
    save_tiny_wan_lora(out, pipe.transformer, TINY_EXPERT_LORAS[0], seed=35)
    save_tiny_wan_lora(out, pipe.transformer_2, TINY_EXPERT_LORAS[1], seed=36)


def _build_wan_ti2v(out: Path) -> None:
    from diffusers import AutoencoderKLWan, WanPipeline

    tokenizer, text_encoder = tiny_umt5(0)
    seeded(35)
    # The Wan2.2-VAE layout (diffusers' conversion of Wan2.2_VAE.pth): residual blocks, 2x2 patchified RGB
    # (12 channels), z_dim 48, 16x spatial and 4x temporal compression; tiny channel counts.
    vae = AutoencoderKLWan(
        base_dim=3,
        z_dim=48,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        is_residual=True,
        in_channels=12,
        out_channels=12,
        patch_size=2,
        scale_factor_spatial=16,
        scale_factor_temporal=4,
        latents_mean=[0.0] * 48,
        latents_std=[1.0] * 48,
    )
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=tiny_unipc(),
        transformer=tiny_wan_transformer(36, channels_in=48, channels_out=48),
        expand_timesteps=True,  # TI2V-5B: per-token timesteps, the image latent is frame 0 at t=0
    )
    pipe.save_pretrained(out)


I2V_BUILDERS = {
    "tiny-wan-i2v": _build_wan_i2v,
    "tiny-wan-i2v-a14b": _build_wan_i2v_a14b,
    "tiny-wan-ti2v": _build_wan_ti2v,
}

"""Tiny random-weight models of the families served by the generic adapter (``pipelines.families.generic``).

Built offline like the others in ``pipelines.tiny.builders`` (same seeding, same ``save_pretrained`` layout,
loaded by the same ``from_pretrained`` code as the real weights). Component configs are shrunk the way diffusers'
own fast tests shrink them (``get_dummy_components`` in diffusers' ``tests/pipelines/<family>/``), except where the
production layout matters to us: the VAE keeps the real spatial/temporal compression, so the tiny model has the
real entry's stride and frame rule.

- ``tiny-hunyuan15``: HunyuanVideo 1.5 (``HunyuanVideo15Pipeline``): ``HunyuanVideo15Transformer3DModel``,
  ``AutoencoderKLHunyuanVideo15`` (16x spatial, 4x temporal, as the real VAE), ``Qwen2_5_VLTextModel`` with a
  byte-level ``Qwen2Tokenizer`` and a ChatML template built in code, ``T5EncoderModel`` + ``ByT5Tokenizer``
  (the glyph encoder), a ``FlowMatchEulerDiscreteScheduler`` and a ``ClassifierFreeGuidance`` guider.
- ``tiny-hunyuan15-i2v``: its image-to-video twin (``HunyuanVideo15ImageToVideoPipeline``): the same parts with the
  transformer's ``task_type`` i2v, plus a two-layer ``SiglipVisionModel`` as wide as the transformer's image
  embedding and a ``SiglipImageProcessorPil`` at its image size (the real one is SigLIP so400m at 384).
- ``tiny-skyreels-v2``: SkyReels-V2 (``SkyReelsV2Pipeline``): ``SkyReelsV2Transformer3DModel`` (the Wan layout),
  ``AutoencoderKLWan`` (the Wan 2.1 VAE it ships: 8x spatial, 4x temporal), ``T5EncoderModel`` + ``ByT5Tokenizer``
  (the real text encoder is UMT5-XXL; the pipeline takes either class), ``UniPCMultistepScheduler``.

``SHRUNK_COMPONENTS`` at the end is the table ``genworker pipeline new`` writes new builders from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines.tiny.parts import seeded

__all__ = ["GENERIC_BUILDERS", "byte_chat_tokenizer", "byte_t5"]

# ChatML, what Qwen2.5-VL's tokenizer applies (system + user turns, then the assistant prompt).
_CHATML_TEMPLATE = (
    "{%- for m in messages -%}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


def byte_chat_tokenizer(max_length: int = 2048) -> Any:
    """A real ``Qwen2Tokenizer`` whose base vocabulary is the 256 byte stand-ins: any text encodes, no files."""
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=[], unk_token=None, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}, replace_extra_special_tokens=False
    )
    tokenizer.chat_template = _CHATML_TEMPLATE
    tokenizer.model_max_length = max_length
    return tokenizer


def byte_t5(seed: int, *, d_model: int) -> tuple[Any, Any]:
    """``ByT5Tokenizer`` (no vocab files) and a two-layer ``T5EncoderModel`` of width ``d_model``."""
    from transformers import ByT5Tokenizer, T5Config, T5EncoderModel

    tokenizer = ByT5Tokenizer()
    tokenizer.model_max_length = 512
    seeded(seed)
    encoder = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer),
            d_model=d_model,
            d_kv=8,
            d_ff=2 * d_model,
            num_layers=2,
            num_heads=2,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=32,
            dropout_rate=0.0,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=0,
        )
    ).eval()
    return tokenizer, encoder


# ----------------------------------------------------------------------------------------------- HunyuanVideo 1.5


def _build_hunyuan15(out: Path) -> None:
    from diffusers import HunyuanVideo15Pipeline

    HunyuanVideo15Pipeline(**_hunyuan15_parts("t2v")).save_pretrained(out)


def _build_hunyuan15_i2v(out: Path) -> None:
    from diffusers import HunyuanVideo15ImageToVideoPipeline
    from transformers import SiglipImageProcessorPil, SiglipVisionConfig, SiglipVisionModel

    parts = _hunyuan15_parts("i2v")
    seeded(47)
    image_size = 32
    image_encoder = SiglipVisionModel(
        SiglipVisionConfig(
            hidden_size=parts["transformer"].config.image_embed_dim,
            intermediate_size=24,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=image_size,
            patch_size=8,
        )
    ).eval()
    # FLUX.1-Redux-dev's preprocessor settings (mean and std 0.5, bicubic) at the tiny encoder's image size.
    feature_extractor = SiglipImageProcessorPil(size={"height": image_size, "width": image_size})
    pipe = HunyuanVideo15ImageToVideoPipeline(**parts, image_encoder=image_encoder, feature_extractor=feature_extractor)
    pipe.save_pretrained(out)


def _hunyuan15_parts(task_type: str) -> dict[str, Any]:
    """The tiny HunyuanVideo 1.5 components, same seeds for both modes (the transformer's ``task_type`` aside)."""
    from diffusers import AutoencoderKLHunyuanVideo15, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Transformer3DModel
    from diffusers.guiders import ClassifierFreeGuidance
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    tokenizer = byte_chat_tokenizer()
    seeded(40)
    # diffusers' test config (hidden 16, mrope sections summing to head_dim / 2).
    text_encoder = Qwen2_5_VLTextModel(
        Qwen2_5_VLTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=16,
            num_hidden_layers=3,  # the pipeline reads hidden_states[-3]
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
            rope_theta=1000000.0,
            bos_token_id=None,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    ).eval()
    tokenizer_2, text_encoder_2 = byte_t5(41, d_model=32)
    seeded(42)
    transformer = HunyuanVideo15Transformer3DModel(
        in_channels=9,  # latents + condition latents + mask: 2 * latent_channels + 1
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=8,
        num_layers=1,
        num_refiner_layers=1,
        mlp_ratio=2.0,
        patch_size=1,
        patch_size_t=1,
        text_embed_dim=16,  # = the Qwen hidden size
        text_embed_2_dim=32,  # = the T5 d_model
        image_embed_dim=12,
        rope_axes_dim=(2, 2, 4),
        target_size=16,
        task_type=task_type,
    ).eval()
    seeded(43)
    # The real VAE's 16x spatial / 4x temporal compression (five blocks), with 4-8 channels (an upsampling
    # stage needs at least 8 channels at its input: it splits them over the 2x2x2 pixel shuffle).
    vae = AutoencoderKLHunyuanVideo15(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        block_out_channels=(4, 4, 8, 8, 8),
        layers_per_block=1,
        spatial_compression_ratio=16,
        temporal_compression_ratio=4,
        downsample_match_channel=False,
        upsample_match_channel=False,
    ).eval()
    return {
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "transformer": transformer,
        "vae": vae,
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=5.0),  # the 480p checkpoints' shift
        "text_encoder_2": text_encoder_2,
        "tokenizer_2": tokenizer_2,
        "guider": ClassifierFreeGuidance(guidance_scale=6.0),
    }


# ----------------------------------------------------------------------------------------------- SkyReels-V2


def _build_skyreels_v2(out: Path) -> None:
    from diffusers import AutoencoderKLWan, SkyReelsV2Pipeline, SkyReelsV2Transformer3DModel

    tokenizer, text_encoder = byte_t5(44, d_model=32)
    seeded(45)
    # diffusers' SkyReels-V2 test transformer (the Wan layout), text_dim = the T5 width.
    transformer = SkyReelsV2Transformer3DModel(**SHRUNK_COMPONENTS["SkyReelsV2Transformer3DModel"]).eval()
    seeded(46)
    # The Wan 2.1 VAE layout SkyReels-V2 ships (8x spatial, 4x temporal), as tiny-wan's.
    vae = AutoencoderKLWan(**SHRUNK_COMPONENTS["AutoencoderKLWan"]).eval()
    pipe = SkyReelsV2Pipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        transformer=transformer,
        vae=vae,
        scheduler=_unipc(),
    )
    pipe.save_pretrained(out)


def _unipc() -> Any:
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(**SHRUNK_COMPONENTS["UniPCMultistepScheduler"])


GENERIC_BUILDERS: dict[str, Callable[[Path], None]] = {
    "tiny-hunyuan15": _build_hunyuan15,
    "tiny-hunyuan15-i2v": _build_hunyuan15_i2v,
    "tiny-skyreels-v2": _build_skyreels_v2,
}


# ----------------------------------------------------------------------------------------------- the scaffold's table

# Shrunk constructor keywords per component class, from diffusers' fast tests (``get_dummy_components`` in
# diffusers' tests/pipelines/<family>/test_*.py, diffusers v0.42.1), except that VAEs keep the real compression
# (so a tiny entry has the real stride and frame rule). ``genworker pipeline new`` writes these into a new
# family's tiny builder, one explicit constructor call per component, for the contributor to read and adjust.
# Text stacks use the byte-level tokenizers above (no vocab files to download): ``T5EncoderModel`` pairs with
# ``byte_t5`` (d_model 32), Qwen-style encoders with ``byte_chat_tokenizer``.
SHRUNK_COMPONENTS: dict[str, dict[str, Any]] = {
    # CogVideoX (tests/pipelines/cogvideo/test_cogvideox.py); text_embed_dim = the byte T5's d_model.
    "CogVideoXTransformer3DModel": {
        "num_attention_heads": 4,
        "attention_head_dim": 8,
        "in_channels": 4,
        "out_channels": 4,
        "time_embed_dim": 2,
        "text_embed_dim": 32,
        "num_layers": 1,
        "sample_width": 2,
        "sample_height": 2,
        "sample_frames": 9,
        "patch_size": 2,
        "temporal_compression_ratio": 4,
        "max_text_seq_length": 226,  # the pipeline pads prompts to 226 tokens (its max_sequence_length)
    },
    "AutoencoderKLCogVideoX": {
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["CogVideoXDownBlock3D"] * 4,  # four blocks: the real 8x spatial compression
        "up_block_types": ["CogVideoXUpBlock3D"] * 4,
        "block_out_channels": [4, 4, 4, 4],  # the test's 8 halved: the decode dominates a CPU job
        "latent_channels": 4,
        "layers_per_block": 1,
        "norm_num_groups": 2,
        "temporal_compression_ratio": 4,
    },
    "CogVideoXDDIMScheduler": {},
    "CogVideoXDPMScheduler": {},
    # HunyuanVideo 1.5 (tests/pipelines/hunyuan_video1_5/test_hunyuan_1_5.py), as _build_hunyuan15 above.
    "HunyuanVideo15Transformer3DModel": {
        "in_channels": 9,
        "out_channels": 4,
        "num_attention_heads": 2,
        "attention_head_dim": 8,
        "num_layers": 1,
        "num_refiner_layers": 1,
        "mlp_ratio": 2.0,
        "patch_size": 1,
        "patch_size_t": 1,
        "text_embed_dim": 16,
        "text_embed_2_dim": 32,
        "image_embed_dim": 12,
        "rope_axes_dim": [2, 2, 4],
        "target_size": 16,
        "task_type": "t2v",
    },
    "AutoencoderKLHunyuanVideo15": {
        "in_channels": 3,
        "out_channels": 3,
        "latent_channels": 4,
        "block_out_channels": [4, 4, 8, 8, 8],
        "layers_per_block": 1,
        "spatial_compression_ratio": 16,
        "temporal_compression_ratio": 4,
        "downsample_match_channel": False,
        "upsample_match_channel": False,
    },
    # SkyReels-V2 (tests/pipelines/skyreels_v2/test_skyreels_v2.py) and the Wan 2.1 VAE it ships, as tiny-wan's.
    "SkyReelsV2Transformer3DModel": {
        "patch_size": [1, 2, 2],
        "num_attention_heads": 2,
        "attention_head_dim": 12,
        "in_channels": 16,
        "out_channels": 16,
        "text_dim": 32,
        "freq_dim": 256,
        "ffn_dim": 32,
        "num_layers": 2,
        "cross_attn_norm": True,
        "qk_norm": "rms_norm_across_heads",
        "rope_max_seq_len": 1024,
    },
    "AutoencoderKLWan": {
        "base_dim": 3,
        "z_dim": 16,
        "dim_mult": [1, 1, 1, 1],
        "num_res_blocks": 1,
        "temperal_downsample": [False, True, True],
    },
    "FlowMatchEulerDiscreteScheduler": {"shift": 5.0},
    "UniPCMultistepScheduler": {"prediction_type": "flow_prediction", "use_flow_sigmas": True, "flow_shift": 3.0},
}
# Components built by a helper of this module instead of keywords: class name -> the expression that builds them
# (tokenizer and text encoder come in pairs, so each names its half of the pair).
SHRUNK_TEXT: dict[str, str] = {
    "T5EncoderModel": "byte_t5(1, d_model=32)[1]",
    "UMT5EncoderModel": "byte_t5(1, d_model=32)[1]",
    "T5Tokenizer": "byte_t5(1, d_model=32)[0]",
    "T5TokenizerFast": "byte_t5(1, d_model=32)[0]",
    "ByT5Tokenizer": "byte_t5(1, d_model=32)[0]",
    "AutoTokenizer": "byte_t5(1, d_model=32)[0]",
}

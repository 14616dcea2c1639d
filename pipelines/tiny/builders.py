"""Tiny random-weight models, built offline from configs: ``tiny-ltx2`` and ``tiny-chat-llm`` here, the Wan
text-to-video layouts in ``pipelines.tiny.wan``, the image-to-video ones in ``pipelines.tiny.i2v`` and the generic
adapter's families in ``pipelines.tiny.generic``.

They use the production classes (``UMT5EncoderModel`` + ``ByT5Tokenizer`` for Wan; Gemma-3 with a tokenizer
built in code, a 32x/8x video VAE and a x240 vocoder for LTX-2; Qwen3 with a byte-level BPE tokenizer and a
ChatML template for prompt extension), are saved with ``save_pretrained`` and are loaded by the same
``from_pretrained`` code as real weights. Nothing is downloaded.

Builds are deterministic (every component is initialised right after ``torch.manual_seed``), so the same
builder version writes the same safetensors. Each model directory gets a marker naming the builder version
and is moved into place only when complete; ``build_all`` skips complete, current builds.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from pipelines.runtime.profile import quiet_progress_bars
from pipelines.tiny.generic import GENERIC_BUILDERS
from pipelines.tiny.i2v import I2V_BUILDERS
from pipelines.tiny.parts import seeded
from pipelines.tiny.wan import WAN_BUILDERS

__all__ = ["BUILDER_VERSION", "MARKER", "TINY_MODELS", "build_all", "is_built"]

# Bump when a builder changes what it writes: existing builds are then rebuilt on the next start.
# 3: tiny-wan-i2v-a14b ships one LoRA per expert; 4: tiny-wan-i2v ships a LoRA; 5: tiny-wan-a14b (two experts);
# 6: tiny-ltx2 ships LTX-2's own scheduler config (dynamic shift).
# 7: tiny-ltx2 ships a diffusion video decoder (LTX-2.5's, ``diffusion_decoder/``).
# 8: tiny-ltx2 ships a second transformer (LTX-2.5's full model beside the distilled one, ``transformer_full/``).
BUILDER_VERSION = 8
MARKER = "genworker-tiny-build.json"
TINY_MODELS: tuple[str, ...] = (*WAN_BUILDERS, "tiny-ltx2", "tiny-chat-llm")  # Wan text-to-video: pipelines/tiny/wan.py
TINY_MODELS += tuple(I2V_BUILDERS)  # image-to-video layouts (pipelines/tiny/i2v.py)
TINY_MODELS += tuple(GENERIC_BUILDERS)  # families of the generic adapter (pipelines/tiny/generic.py)


def is_built(model_dir: Path) -> bool:
    """True when ``model_dir`` holds a complete build of the current builder version."""
    try:
        marker = json.loads((model_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(marker.get("builder_version") == BUILDER_VERSION)


def build_all(out_dir: str | Path, *, force: bool = False) -> dict[str, Path]:
    """Build every tiny model under ``out_dir`` (skipping complete builds unless ``force``); return their dirs.

    Safe to call from several processes at once: builds are serialised by a lock file in ``out_dir``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    builders: dict[str, Callable[[Path], None]] = {
        **WAN_BUILDERS,
        "tiny-ltx2": _build_ltx2,
        "tiny-chat-llm": _build_chat_llm,
        **I2V_BUILDERS,
        **GENERIC_BUILDERS,
    }
    paths: dict[str, Path] = {}
    with FileLock(out / ".tiny-build.lock"):
        for name, builder in builders.items():
            target = out / name
            paths[name] = target
            if not force and is_built(target):
                continue
            staging = out / f".{name}.building-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            quiet_progress_bars()
            builder(staging)
            (staging / MARKER).write_text(
                json.dumps({"name": name, "builder_version": BUILDER_VERSION}, indent=2) + "\n", encoding="utf-8"
            )
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)  # a model dir that exists is complete
    return paths


# ----------------------------------------------------------------------------------------------------- LTX-2
# Lightricks/LTX-2's scheduler/scheduler_config.json (the revision the catalog pins): the token-count shift and
# terminal stretch the pipeline applies when no sigmas are given, so a tiny job sees what a real one would.
LTX2_SCHEDULER: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.95,
    "max_shift": 2.05,
    "base_image_seq_len": 1024,
    "max_image_seq_len": 4096,
    "shift_terminal": 0.1,
    "time_shift_type": "exponential",
}

_GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def _gemma_tokenizer() -> Any:
    """A real GemmaTokenizer (BPE with byte fallback) over a vocab built in code: any UTF-8 text encodes."""
    from transformers import GemmaTokenizer

    specials = [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<mask>",
        "<start_of_turn>",
        "<end_of_turn>",
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
    ]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for ch in ["▁"] + [chr(c) for c in range(33, 127)]:
        vocab.setdefault(ch, len(vocab))
    tokenizer = GemmaTokenizer(
        vocab=vocab,
        merges=[],
        # Gemma3Processor reads tokenizer.boi_token / eoi_token / image_token: they must be named specials.
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
    )
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]}, replace_extra_special_tokens=False
    )
    tokenizer.chat_template = _GEMMA3_CHAT_TEMPLATE
    # Byte-level tokens: a long system prompt plus a 5000-character prompt must fit without warnings.
    tokenizer.model_max_length = 8192
    return tokenizer


def _gemma3_encoder(tokenizer: Any) -> Any:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    text_config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=8192,
        sliding_window=64,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")],
    )
    vision_config = SiglipVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
    )
    config = Gemma3Config(
        text_config=text_config,
        vision_config=vision_config,
        mm_tokens_per_image=4,  # (28/14)^2 patches pooled to 2x2 tokens
        boi_token_index=tokenizer.convert_tokens_to_ids("<start_of_image>"),
        eoi_token_index=tokenizer.convert_tokens_to_ids("<end_of_image>"),
        image_token_index=tokenizer.convert_tokens_to_ids("<image_soft_token>"),
    )
    seeded(10)
    return Gemma3ForConditionalGeneration(config).eval()


def _ltx2_video_vae() -> Any:
    from diffusers import AutoencoderKLLTX2Video

    seeded(13)
    # The real LTX-2 block layout (32x spatial, 8x temporal) with tiny channel counts. The diffusers test
    # VAE (2x/2x) makes ~100x more tokens per frame and is far slower on CPU.
    vae = AutoencoderKLLTX2Video(
        in_channels=3,
        out_channels=3,
        latent_channels=8,
        block_out_channels=(8, 16, 32, 32),  # increasing: equal counts crash the decoder
        decoder_block_out_channels=(8, 16, 32),
        layers_per_block=(1, 1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1),
        spatio_temporal_scaling=(True, True, True, True),
        decoder_spatio_temporal_scaling=(True, True, True),
        decoder_inject_noise=(False, False, False, False),
        downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
        upsample_type=("spatiotemporal",) * 3,
        upsample_residual=(True, True, True),
        upsample_factor=(2, 2, 2),
        timestep_conditioning=False,
        patch_size=4,
        patch_size_t=1,
        encoder_causal=True,
        decoder_causal=False,
        # Stated explicitly: the built-in formula gives 64 for this layout.
        spatial_compression_ratio=32,
        temporal_compression_ratio=8,
    )
    vae.use_framewise_encoding = False
    vae.use_framewise_decoding = False
    return vae


def _build_ltx2(out: Path) -> None:
    from diffusers import (
        AutoencoderKLLTX2Audio,
        FlowMatchEulerDiscreteScheduler,
        LTX2Pipeline,
        LTX2VideoTransformer3DModel,
    )
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder
    from transformers import Gemma3ImageProcessorPil, Gemma3Processor

    tokenizer = _gemma_tokenizer()
    text_encoder = _gemma3_encoder(tokenizer)
    hidden = text_encoder.config.text_config.hidden_size
    layers = text_encoder.config.text_config.num_hidden_layers
    seeded(11)
    transformer = LTX2VideoTransformer3DModel(
        in_channels=8,  # = the VAE's latent_channels
        out_channels=8,
        patch_size=1,
        patch_size_t=1,
        num_attention_heads=2,
        attention_head_dim=8,
        cross_attention_dim=16,
        audio_in_channels=4,
        audio_out_channels=4,
        audio_num_attention_heads=2,
        audio_attention_head_dim=4,
        audio_cross_attention_dim=8,
        num_layers=2,
        qk_norm="rms_norm_across_heads",
        caption_channels=hidden,
        rope_double_precision=False,
        rope_type="split",
    )
    seeded(12)
    connectors = LTX2TextConnectors(
        caption_channels=hidden,
        text_proj_in_factor=layers + 1,  # the pipeline stacks every hidden state (layers + embeddings)
        video_connector_num_attention_heads=4,
        video_connector_attention_head_dim=8,
        video_connector_num_layers=1,
        video_connector_num_learnable_registers=None,
        audio_connector_num_attention_heads=4,
        audio_connector_attention_head_dim=8,
        audio_connector_num_layers=1,
        audio_connector_num_learnable_registers=None,
        connector_rope_base_seq_len=32,
        rope_theta=10000.0,
        rope_double_precision=False,
        causal_temporal_positioning=False,
        rope_type="split",
    )
    vae = _ltx2_video_vae()
    seeded(14)
    audio_vae = AutoencoderKLLTX2Audio(
        base_channels=4,
        output_channels=2,
        ch_mult=(1,),
        num_res_blocks=1,
        attn_resolutions=None,
        in_channels=2,
        resolution=32,
        latent_channels=2,
        norm_type="pixel",
        causality_axis="height",
        dropout=0.0,
        mid_block_add_attention=False,
        sample_rate=16000,
        mel_hop_length=160,
        is_causal=True,
        mel_bins=8,
    )
    seeded(15)
    # Production upsampling 6*5*2*2*2 = 240 = hop 160 * 24000/16000: the waveform has the video's length.
    vocoder = LTX2Vocoder(
        in_channels=audio_vae.config.output_channels * audio_vae.config.mel_bins,
        hidden_channels=32,
        out_channels=2,
        upsample_kernel_sizes=[16, 15, 8, 4, 4],
        upsample_factors=[6, 5, 2, 2, 2],
        resnet_kernel_sizes=[3],
        resnet_dilations=[[1, 3, 5]],
        leaky_relu_negative_slope=0.1,
        output_sampling_rate=24000,
    )
    # The processor lets the text encoder double as the prompt enhancer (LTX-2.0 style).
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessorPil(size={"height": 28, "width": 28}),
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
        image_seq_length=text_encoder.config.mm_tokens_per_image,
    )
    pipe = LTX2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER),
        vae=vae,
        audio_vae=audio_vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        connectors=connectors,
        transformer=transformer,
        vocoder=vocoder,
        processor=processor,
    )
    pipe.save_pretrained(out)
    _ltx2_full_transformer(out, transformer)
    _ltx2_two_stage_parts(out, transformer, latent_channels=vae.config.latent_channels)
    _ltx2_diffusion_decoder(out, latent_channels=vae.config.latent_channels)


# What the two-stage recipe adds to the LTX-2 weights (file names as in Lightricks/LTX-2's Diffusers layout).
TINY_LTX2_LORA = "tiny-distilled-lora.safetensors"


def _ltx2_two_stage_parts(out: Path, transformer: Any, *, latent_channels: int) -> None:
    """The x2 latent upsampler (``latent_upsampler/``) and a distilled-style LoRA over the transformer."""
    from diffusers import LTX2Pipeline
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel
    from peft import LoraConfig, get_peft_model_state_dict

    seeded(16)
    # The production layout (3D blocks, rational x2 spatial resampler), 32 channels instead of 1024.
    upsampler = LTX2LatentUpsamplerModel(
        in_channels=latent_channels, mid_channels=32, num_blocks_per_stage=1, dims=3, spatial_upsample=True
    )
    upsampler.save_pretrained(out / "latent_upsampler")
    seeded(17)
    # Random non-zero B matrices (peft would start them at zero), so switching the LoRA on changes the output.
    transformer.add_adapter(
        LoraConfig(r=4, lora_alpha=4, init_lora_weights=False, target_modules=["to_q", "to_k", "to_v", "to_out.0"])
    )
    LTX2Pipeline.save_lora_weights(
        out, transformer_lora_layers=get_peft_model_state_dict(transformer), weight_name=TINY_LTX2_LORA
    )


def _ltx2_full_transformer(out: Path, transformer: Any) -> None:
    """LTX-2.5-Diffusers' layout: the full model in ``transformer_full/`` beside the distilled ``transformer/`` that
    ``model_index.json`` names. Same architecture, other random weights, so a test tells which one ran."""
    seeded(19)
    type(transformer).from_config(transformer.config).save_pretrained(out / "transformer_full")


def _ltx2_diffusion_decoder(out: Path, *, latent_channels: int) -> None:
    """LTX-2.5's diffusion video decoder (``diffusion_decoder/``) over the tiny VAE's latent space.

    The real one upsamples 8x in space and patches by 4; this one upsamples only in time (8x, as the real one)
    and patches by 32, the same 32x32x8 decode: its stage-5 grid has the latent's size, not 8x it. FlexAttention
    (the CPU path) builds dense scores, which at 8x the tokens would need tens of GB at 240p x 10 s."""
    from diffusers import LTX2VideoDiffusionDecoderModel

    seeded(18)
    LTX2VideoDiffusionDecoderModel(
        latent_channels=latent_channels,
        patch_size=32,
        decoder_head_dim=16,
        decoder_stage_channels=(32, 16, 16, 16, 16),
        decoder_stage_depths=(1, 1, 1, 1, 1),
        decoder_stage_kernels=((3, 3, 3),) * 4,
        decoder_upsample_strides=((1, 1, 1), (2, 1, 1), (2, 1, 1), (2, 1, 1)),
        decoder_upsample_channel_reductions=(2, 1, 1, 1),
        decoder_stage5_kernel=(3, 3, 3),
        decoder_t_emb_dim=32,
    ).save_pretrained(out / "diffusion_decoder")


# ----------------------------------------------------------------------------------------------------- chat LLM

_CHATML_TEMPLATE = (
    "{%- for m in messages -%}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


def _build_chat_llm(out: Path) -> None:
    from transformers import Qwen2Tokenizer, Qwen3Config, Qwen3ForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    # Byte-level BPE whose base vocab is the 256 byte stand-ins: every UTF-8 string encodes, no merges needed.
    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=[], unk_token=None, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}, replace_extra_special_tokens=False
    )
    tokenizer.chat_template = _CHATML_TEMPLATE
    tokenizer.model_max_length = 8192
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=8192,  # byte-level tokens: system prompt + a 2000-character prompt
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    seeded(20)
    model = Qwen3ForCausalLM(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)

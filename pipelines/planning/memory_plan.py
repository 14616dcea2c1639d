"""The memory plan: which sizes of a catalog model fit a device under the model's runtime profile.

Weights come from the real architecture configs shipped in ``configs/arch/<model id>/<component>.json``
(sources in ``configs/arch/README.md``), instantiated on the meta device, so every parameter and buffer is
counted without allocating it, at the dtype the runtime profile gives that component (plus the modules the
class keeps in float32). Activations and decode memory are estimates (formulas below, documented in
docs/gpu.md):

- **denoise**: ``batch x tokens x (2 * ffn_dim + 6 * hidden) x 2 bytes``: the FFN's up-projection and its
  GELU output, plus q, k, v, the attention output, the residual and the modulated input, for one block at a
  time (inference keeps no activations across blocks; SDPA's flash/cuDNN/efficient kernels need no L^2
  score matrix). ``batch`` is 2 where the pipeline batches CFG (LTX-2), 1 where it runs the two branches in
  turn (Wan). LTX-2's two-stage recipe runs stage 1 at half the size with CFG and stage 2 at full size
  without: the larger of the two counts. Masks stay per key: HunyuanVideo 1.5's joint attention runs with a
  (1, 1, 1, L) key-padding mask (``pipelines.families.hunyuan15``), not diffusers' dense (1, 1, L, L) one, which
  would add 2 L^2 bytes per call in the processor alone (4.7 GiB at 832x480 x 121 frames, 24 GiB at 1280x720).
  Wan 2.2 TI2V 5B adds its per-token modulation (a timestep per token). Checked against ``genworker simulate``
  (every catalog job at full size on the CPU under fake tensors: live tensor bytes per phase); ``make gpu-smoke``
  prints measured peaks beside these figures on a GPU.
- **encode**: the text encoders' activations at their family's fixed text length (``ENCODE_GB``, simulated).
- **decode**: one decoder call's working set at full resolution, ``DECODE_WORKING`` units of
  ``frames x (H / patch) x (W / patch) x C_last x bytes``, where ``C_last`` is the channels entering the
  decoder's ``conv_out`` (units calibrated by ``genworker simulate``; LTX-2's 2, its module's input and output,
  reproduces the 7.6 GiB (1080p, 5 s) and 15.1 GiB (10 s) of research/gpu-recipes.md). Tiling bounds frames and
  size to one tile (LTX-2: 16 frames of 512x512; Wan: 256x256); Wan's causal decoder takes 4 frames at a time
  whatever the tiling. HunyuanVideo 1.5's decoder (``AutoencoderKLHunyuanVideo15``) takes every frame at once,
  tiles only in space (256x256) and keeps every decoded tile until it blends them. The decode rule follows the
  VAE's class, so the generic ``diffusers`` family (SkyReels-V2 on the Wan VAE, HunyuanVideo 1.5) gets the rule
  of the VAE it loads. The decoded video itself (3 channels) is added, as many copies as the decoder holds
  (``VIDEO_COPIES``).
- **reserve**: CUDA context, cuBLAS workspaces and allocator fragmentation: 1.5 GB + 5 % of the device.

Phases: ``extend`` (the chat LLM, which visits the device only for its call), ``encode`` (text encoder and
connectors), ``denoise`` (the transformers; Wan 2.2's experts one at a time under offload), ``decode``
(VAEs, vocoder). Offload ``none`` keeps every component resident, so each phase adds its activations to the
sum; ``model`` keeps only the running phase's largest component (plus LTX-2's latent upsampler, which the
adapter pins); ``group`` streams leaf modules (twice the largest leaf) and keeps the VAEs resident.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from foundation.core.catalog import config_dir
from foundation.core.resolve import frames_for, generation_size

if TYPE_CHECKING:
    import torch

    from foundation.core.catalog import ModelSpec, RuntimeProfile

__all__ = [
    "DECODER",
    "DECODE_WORKING",
    "ENCODE_GB",
    "GPU_CLASSES",
    "OFFLOAD_MODES",
    "VIDEO_COPIES",
    "Component",
    "JobShape",
    "ModelPlan",
    "SizeRow",
    "activation_gb",
    "arch_dir",
    "decode_gb",
    "device_memory_gb",
    "encode_gb",
    "load_components",
    "peak_gb",
    "phase_gb",
    "plan_model",
    "reserve_gb",
]

GB = 1e9
Offload = Literal["none", "model", "group"]
OFFLOAD_MODES: tuple[Offload, ...] = ("none", "model", "group")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ACT_BYTES = 2  # activations in bf16/fp16: the production dtype of every denoiser
# Components that are not the denoiser, the text stack or the decoder, by phase.
ENCODE = ("text_encoder", "text_encoder_2", "image_encoder", "connectors")
DENOISE = ("transformer", "transformer_2")
DECODE = ("vae", "audio_vae", "vocoder")
PINNED = ("latent_upsampler", "diffusion_decoder")  # resident whatever the offload (pipelines/families/ltx2.py)
# The decode rule of each VAE class, whatever the family that loads it (the generic family reuses them).
DECODER = {"AutoencoderKLWan": "wan", "AutoencoderKLLTX2Video": "ltx2", "AutoencoderKLHunyuanVideo15": "hunyuan15"}
# Tiles of diffusers' tiled decoders (frames, height, width; the class defaults in diffusers 0.42.1). 0 frames:
# the decoder tiles only in space and takes every frame at once (AutoencoderKLHunyuanVideo15.tiled_decode).
TILE = {"ltx2": (16, 512, 512), "wan": (4, 256, 256), "hunyuan15": (0, 256, 256)}
WAN_DECODE_FRAMES = 4  # Wan's causal decoder: one latent frame (4 output frames) per call
LTX2_DENOISE_FACTOR = 2.0  # LTX-2's live activations per token over the per-block formula (simulated)
PER_TOKEN_Z_DIM = 48  # the Wan 2.2 VAE (TI2V 5B), whose pipeline runs a timestep per token (expand_timesteps)
TILE_STRIDE = 192  # the tiled decoders' step between 256-pixel tiles (a 0.25 overlap), Wan's and HunyuanVideo 1.5's
# Calibrated by ``genworker simulate`` (every catalog job at full size under fake tensors, diffusers 0.42.1; the
# figures per job are in docs/gpu.md): the live tensors of one decoder call, in units of the module term
# (frames x H/patch x W/patch x C_last x bytes). Wan's up-blocks hold the 192-channel upsampled frames, their convs'
# outputs and the causal caches (12.5 units of C_last = 96); HunyuanVideo 1.5's decoder holds several all-frame
# 128-channel tensors of a tile plus their padded copies (6.6); LTX-2 keeps the module's input and output (2, the
# untiled figures of research/gpu-recipes.md).
DECODE_WORKING = {"wan": 12.5, "hunyuan15": 6.6, "ltx2": 2.0}
# Copies of the decoded video held at once, by (rule, tiled): untiled, the output and its concatenation; tiled, the
# overlapping decoded tiles, the blended rows and their concatenation (Wan).
VIDEO_COPIES = {
    ("wan", False): 2.0,
    ("wan", True): 4.0,
    ("hunyuan15", True): 2.0,
    ("hunyuan15", False): 2.0,
    ("ltx2", True): 3.3,  # the 16-frame tiles, their blend and the concatenated clip (10.3 GB at 1472x1472 x 241)
}
# Tiled decoders that keep every decoded tile (all frames) until they blend them: diffusers'
# AutoencoderKLHunyuanVideo15.tiled_decode (28 tiles at 1280x720).
KEEPS_TILES = ("hunyuan15",)
# The prompt encode's activations per text encoder class, at the text length its family pads every prompt to
# (UMT5 512 tokens, Gemma-3 1,024 with CFG, Qwen2.5-VL 1,000 + byT5 256), from ``genworker simulate``, rounded up.
# LTX2Pipeline runs the whole Gemma-3 (every hidden state kept for the connectors, and its vocabulary head).
ENCODE_GB = {
    "UMT5EncoderModel": 0.15,
    "Qwen2_5_VLTextModel": 0.45,
    "T5EncoderModel": 0.05,
    "Gemma3ForConditionalGeneration": 6.0,
    # LTX-2.5's Gemma-4 12B with CFG (the prompt and the negative one): 4.14 GB simulated (ltx-2.5-dev); ltx-2.5's
    # unguided encode, one prompt, is 1.69 GB, under this bound and never its plan's peak phase.
    "Gemma4UnifiedForConditionalGeneration": 4.2,
}
# LTX-2.5's diffusion video decoder (``LTX2VideoDiffusionDecoderModel``), calibrated by the simulation of its decode
# under fake tensors with NATTEN's tensors (``pipelines.simulation.simulate.NattenShapedAttention``) at 768x576 x 121
# and 241 frames, 1280x704 x 121 and 1472x1472 x 241 (15.3, 16.7, 19.1 and 28.5 GB; this rule: +0.3, -2.5, +2.8 and
# +2.1 %): the stage-4 input of the whole clip, kept while the tiles run (``features``), ``DIFFUSION_WORKING`` units
# of one stage-5 tensor of a tile (tokens x the last stage's channels: its blocks' hidden states, context, q, k, v
# and their projections) and ``DIFFUSION_VIDEO_COPIES`` of the decoded clip (the decoded tiles and their blends).
DIFFUSION_TILE = (80, 768, 768)  # frames, height, width: the class's tiled-decode defaults (diffusers 0.42.1)
DIFFUSION_WORKING = 12.6
DIFFUSION_VIDEO_COPIES = 1.75


def arch_dir() -> Path:
    return config_dir() / "arch"


def reserve_gb(device_gb: float) -> float:
    """Memory a device never gives the model: CUDA context, workspaces, allocator fragmentation."""
    return 1.5 + 0.05 * device_gb


# What a device reports as its total memory (``torch.cuda.get_device_properties().total_memory``, the figure
# nvidia-smi prints in MiB), in GB, by the name it is sold under: an "80 GB" H100 holds 81,559 MiB = 85.5 GB,
# so a plan for "80" would waste 5 GB of it. The worker reads its own device's figure; these are for planning
# without one (`genworker plan --gpu h100-80gb`, docs/gpu.md's tables). H100 and H200: read on this project's
# lent machines (nvidia-smi); L40S and RTX 4090: the figures their nvidia-smi reports.
GPU_CLASSES: dict[str, float] = {
    "rtx4090-24gb": 24_564 * 2**20 / GB,
    "l40s-48gb": 46_068 * 2**20 / GB,
    "h100-80gb": 81_559 * 2**20 / GB,
    "h200-141gb": 143_771 * 2**20 / GB,
}


@dataclass(frozen=True)
class Component:
    """One pipeline component as its real config builds it, measured on the meta device."""

    name: str
    cls: str
    params: int  # as the config builds it (the LoRA not included)
    lora_params: int  # LTX-2's distilled LoRA on the transformer (an upper bound: every block Linear)
    weight_bytes: int  # parameters and buffers at the profile's dtype (float32-kept modules at 4 bytes)
    largest_leaf_bytes: int  # the biggest leaf module: what group offload holds (twice, with prefetch)
    dims: dict[str, int]  # what the activation formula needs: hidden, ffn, channels, patches


@dataclass(frozen=True)
class SizeRow:
    """One resolution at the longest catalog duration, under each offload mode."""

    resolution: str
    width: int
    height: int
    seconds: int
    frames: int
    peak_gb: dict[Offload, float]  # offload mode -> peak
    verdict: str  # for the profile's offload: fits / needs offload (<mode>) / does not fit
    max_seconds: int  # the longest catalog duration that fits under the profile (0: none)


@dataclass(frozen=True)
class ModelPlan:
    model: str
    profile: RuntimeProfile
    device_gb: float
    components: list[Component]
    rows: list[SizeRow]
    skipped: str = ""  # why the model has no plan ("no arch config ...")
    extend_gb: float = 0.0  # peak while the chat LLM rewrites a prompt (0: no chat LLM)

    def peak_bytes(self) -> int | None:
        """The most device memory a job of this model uses under its profile (the largest size at its longest
        duration, or the prompt extension if more), or None without a plan."""
        if self.skipped or not self.rows:
            return None
        peaks = [row.peak_gb[self.profile.offload] for row in self.rows]
        return int(max([*peaks, self.extend_gb]) * GB)

    def fits(self, resolution: str, seconds: int) -> bool:
        """Whether ``resolution`` for ``seconds`` fits under the profile (a model without a plan: True)."""
        if self.skipped:
            return True
        row = next((r for r in self.rows if r.resolution == resolution), None)
        return row is not None and seconds <= row.max_seconds


# ------------------------------------------------------------------------------------------ components


def load_components(spec: ModelSpec, profile: RuntimeProfile, root: Path | None = None) -> list[Component] | None:
    """The model's components from ``configs/arch/<id>/``, or None when the model ships no arch config."""
    folder = (root or arch_dir()) / spec.id
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        return None
    wanted = spec.prompt_extend is not None and spec.prompt_extend.method == "chat_llm"
    recipe = spec.two_stage
    lora_rank = recipe.lora_rank if recipe is not None and recipe.distilled_lora is not None else 0
    out = []
    for path in files:
        name = path.stem
        if name == "prompt_llm" and not wanted:
            continue
        dtype = profile.dtypes.get(name, spec.dtype)
        lora = lora_rank if name == "transformer" else 0
        fp8 = profile.fp8 if name in DENOISE else "none"  # pipelines.runtime.profile.apply_fp8 casts the denoisers only
        out.append(_measure(name, path.read_text(encoding="utf-8"), dtype, lora_rank=lora, fp8=fp8))
    return out


def _class(library: str, name: str) -> Any:
    """``name`` from the library's top level, or a dotted path for classes it does not export there."""
    module_name, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module_name or library), attr)


def _build_on_meta(entry: dict[str, Any]) -> Any:  # a diffusers or transformers model class of the config
    import torch

    cls = _class(entry["library"], entry["class"])
    with torch.device("meta"):
        if entry["library"] == "diffusers":
            return cls.from_config(entry["config"])
        import transformers

        config = dict(entry["config"])
        config_obj = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
        return cls(config_obj)


def _fp32_kept(module: torch.nn.Module, dtype: str, library: str) -> tuple[str, ...]:
    """Module names the class keeps in float32 when loaded in ``dtype`` (diffusers: any lower dtype;
    transformers: ``_keep_in_fp32_modules`` for fp16 only, ``..._strict`` for fp16 and bf16)."""
    if dtype == "float32":
        return ()
    if library == "diffusers":
        return tuple(getattr(module, "_keep_in_fp32_modules", None) or ())
    keep = tuple(getattr(module, "_keep_in_fp32_modules_strict", None) or ())
    if dtype == "float16":
        keep += tuple(getattr(module, "_keep_in_fp32_modules", None) or ())
    return keep


@functools.lru_cache(maxsize=64)
def _measure(name: str, text: str, dtype: str, *, lora_rank: int = 0, fp8: str = "none") -> Component:
    """Build the component on the meta device and count it (cached: models share components).

    ``lora_rank``: the two-stage recipe's distilled LoRA on the transformer, at this rank (0: none).

    ``fp8``: the profile's FP8 on this component. ``storage`` applies diffusers' own layerwise casting to the
    meta module, so exactly the layers it casts (not norms, embeddings, patch embeddings or float32-kept
    modules) count at 1 byte; ``compute`` counts every ``Linear`` weight at 1 byte, as torchao's float8
    quantization (its default filter: every Linear) stores them."""
    import torch

    entry = json.loads(text)
    module = _build_on_meta(entry)
    keep = _fp32_kept(module, dtype, entry["library"])
    size = DTYPE_BYTES[dtype]
    if fp8 == "storage":
        module.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    quantized = (
        {id(m.weight) for m in module.modules() if isinstance(m, torch.nn.Linear)} if fp8 == "compute" else set()
    )

    def nbytes(tensor_name: str, tensor: torch.Tensor) -> int:
        if tensor.dtype == torch.float8_e4m3fn or id(tensor) in quantized:
            return tensor.numel()
        kept = any(k in tensor_name.split(".") for k in keep)
        return tensor.numel() * (4 if kept or not tensor.is_floating_point() else size)

    params = 0
    weight = 0
    seen: set[int] = set()
    for tensor_name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if id(tensor) in seen:  # tied weights count once
            continue
        seen.add(id(tensor))
        weight += nbytes(tensor_name, tensor)
        if isinstance(tensor, torch.nn.Parameter):
            params += tensor.numel()
    leaf_bytes = max(
        (
            sum(nbytes(n, p) for n, p in m.named_parameters(recurse=False))
            for m in module.modules()
            if not list(m.children())
        ),
        default=0,
    )
    if lora_rank:  # the distilled LoRA on every Linear of the blocks (an upper bound on its targets)
        extra = sum(
            lora_rank * (m.in_features + m.out_features)
            for n, m in module.named_modules()
            if isinstance(m, torch.nn.Linear) and "transformer_blocks" in n
        )
        weight += extra * size
    else:
        extra = 0
    return Component(name, entry["class"], params, extra, weight, leaf_bytes, _dims(module))


def _dims(module: Any) -> dict[str, int]:
    """The few numbers the activation and decode formulas need, read from the built module."""
    config: Any = getattr(module, "config", None)
    out: dict[str, int] = {}
    if hasattr(module, "transformer_blocks") or hasattr(module, "blocks"):  # a denoiser
        heads = int(getattr(config, "num_attention_heads", 0))
        out["hidden"] = heads * int(getattr(config, "attention_head_dim", 0))
        out["ffn"] = int(getattr(config, "ffn_dim", 0) or 4 * out["hidden"])  # diffusers FeedForward mult 4
        patch = getattr(config, "patch_size", 1)
        patch_t = getattr(config, "patch_size_t", None)
        if isinstance(patch, (list, tuple)):
            out["patch_t"], out["patch"] = int(patch[0]), int(patch[1])
        else:
            out["patch_t"], out["patch"] = int(patch_t or 1), int(patch)
        if getattr(config, "audio_num_attention_heads", None):
            out["audio_hidden"] = int(config.audio_num_attention_heads) * int(config.audio_attention_head_dim)
    if getattr(config, "decoder_stage_channels", None):  # LTX-2.5's diffusion video decoder
        out.update(_diffusion_dims(config))
    decoder = getattr(module, "decoder", None)
    conv_out = getattr(decoder, "conv_out", None)
    if conv_out is not None and hasattr(getattr(conv_out, "conv", conv_out), "in_channels"):  # a VAE's conv decoder
        inner: Any = getattr(conv_out, "conv", conv_out)
        out["c_last"] = int(inner.in_channels)
        out["out_patch"] = int(getattr(config, "patch_size", None) or 1)
        spatial: Any = getattr(config, "spatial_compression_ratio", None) or getattr(config, "scale_factor_spatial", 8)
        temporal: Any = getattr(config, "temporal_compression_ratio", None) or getattr(
            config, "scale_factor_temporal", 4
        )
        out["spatial"], out["temporal"] = int(spatial), int(temporal)
        out["z_dim"] = int(getattr(config, "z_dim", None) or getattr(config, "latent_channels", None) or 0)
    return out


def _diffusion_dims(config: Any) -> dict[str, int]:
    """The diffusion decoder's grids: the stage-4 input is the latent upsampled by the first three strides, the
    stage-5 grid the pixels over the patch; the trailing ghost frames it pads the latent with (2 at kernel 3)."""
    strides = config.decoder_upsample_strides
    return {
        "c4": int(config.decoder_stage_channels[-2]),
        "c5": int(config.decoder_stage_channels[-1]),
        "dd_patch": int(config.patch_size),
        "dd_up_t": math.prod(int(s[0]) for s in strides[:-1]),
        "dd_up_s": math.prod(int(s[1]) for s in strides[:-1]),
        "dd_ghost": (int(config.decoder_stage_kernels[0][0]) // 2) * 2,
        "spatial": int(config.spatial_compression_ratio),
        "temporal": int(config.temporal_compression_ratio),
    }


# ------------------------------------------------------------------------------------------ estimates


@dataclass(frozen=True)
class JobShape:
    width: int
    height: int
    frames: int
    seconds: int


def activation_gb(spec: ModelSpec, comps: dict[str, Component], job: JobShape) -> float:
    den = comps.get("transformer") or comps.get("transformer_2")
    vae = comps.get("vae")
    if den is None or vae is None:
        return 0.0
    d, v = den.dims, vae.dims
    lat_frames = (job.frames - 1) // v["temporal"] + 1
    per_frame = (job.height // v["spatial"] // d["patch"]) * (job.width // v["spatial"] // d["patch"])
    tokens = math.ceil(lat_frames / d["patch_t"]) * per_frame
    per_token = float(2 * d["ffn"] + 6 * d["hidden"])
    cfg = any(vr.guidance_scale > 1.0 for mode in spec.modes.values() for vr in mode.variants.values())
    # LTX2Pipeline batches CFG; WanPipeline, SkyReelsV2Pipeline and HunyuanVideo15Pipeline (its guider's
    # batches) run the two branches in turn.
    batch = 2 if cfg and spec.family == "ltx2" else 1
    # Two stages: stage 1 at half the size (a quarter of the tokens) with CFG, stage 2 at full size without.
    work = max(batch * tokens / 4, tokens) if spec.two_stage is not None else batch * tokens
    modulation = 0.0
    if spec.family == "ltx2":
        # Calibrated by ``genworker simulate`` (1472x1472 x 241 frames): stage 2 holds 14.3 GB, twice the per-block
        # formula (the audio-video cross-attention and its nine-way modulation); an image_to_video job adds a timestep
        # per token (its frame 0 stays clean), so the modulation (6 x hidden, 4 live copies) is per token: 26.7 GB.
        per_token *= LTX2_DENOISE_FACTOR
        if "image_to_video" in spec.modes:
            modulation = 4 * tokens * 6 * d["hidden"] * ACT_BYTES
    if DECODER.get(vae.cls) == "wan" and v.get("z_dim") == PER_TOKEN_Z_DIM:
        # Wan 2.2 TI2V 5B (expand_timesteps): a timestep per token, so the block modulation (6 x hidden, float32)
        # is per token too: the time projection's output and its reshaped copy live through every block (1.5
        # copies, from ``genworker simulate``: 5.5 GB at 1280x704 x 121 frames, 2.6 without this term).
        modulation = 1.5 * tokens * 6 * d["hidden"] * 4
    audio = 0.0
    if "audio_hidden" in d:  # LTX-2's audio stream: 25 latent steps per second (16 kHz / hop 160 / 4)
        audio = batch * job.seconds * 25 * 8 * d["audio_hidden"]
    return ((work * per_token + audio) * ACT_BYTES + modulation) / GB


def encode_gb(spec: ModelSpec, comps: dict[str, Component]) -> float:
    """The prompt encode's activations: each text encoder's, at the fixed text length its family pads prompts to
    (``ENCODE_GB``, measured by ``genworker simulate``)."""
    return sum(ENCODE_GB.get(c.cls, 0.0) for name, c in comps.items() if name in ENCODE)


def decode_gb(spec: ModelSpec, profile: RuntimeProfile, comps: dict[str, Component], job: JobShape) -> float:
    """One decoder call's working set (``DECODE_WORKING`` units of its module term), the decoded tiles the tiled
    decoder keeps, and the copies of the decoded video held at once (``VIDEO_COPIES``)."""
    if "diffusion_decoder" in comps:
        return _diffusion_decode_gb(spec, profile, comps["diffusion_decoder"], job)
    vae = comps.get("vae")
    if vae is None or "c_last" not in vae.dims:
        return 0.0
    v = vae.dims
    size = DTYPE_BYTES[profile.dtypes.get("vae", spec.dtype)]
    frames, height, width = job.frames, job.height, job.width
    rule = DECODER.get(vae.cls, "")
    if rule == "wan":
        frames = min(frames, WAN_DECODE_FRAMES)
    tiled = profile.vae_tiling and rule in TILE and (job.height > TILE[rule][1] or job.width > TILE[rule][2])
    if tiled:
        tile_f, tile_h, tile_w = TILE[rule]
        frames, height, width = min(frames, tile_f or frames), min(height, tile_h), min(width, tile_w)
    unit = frames * (height // v["out_patch"]) * (width // v["out_patch"]) * v["c_last"] * size
    video = job.frames * 3 * job.height * job.width * size
    kept = 0
    if tiled and rule in KEEPS_TILES:  # every decoded tile, all frames, until the blend
        tiles = math.ceil(job.height / TILE_STRIDE) * math.ceil(job.width / TILE_STRIDE)
        kept = tiles * job.frames * 3 * height * width * size
    copies = VIDEO_COPIES.get((rule, tiled), 1.0)
    return (DECODE_WORKING.get(rule, 2.0) * unit + kept + copies * video) / GB


def _diffusion_decode_gb(spec: ModelSpec, profile: RuntimeProfile, decoder: Component, job: JobShape) -> float:
    """LTX-2.5's diffusion decode (``DIFFUSION_WORKING``): the whole clip's stage-4 input, one tile's stage 5 (the
    whole clip's untiled) and the decoded clip's copies. The adapter tiles it as the profile tiles the VAE."""
    d = decoder.dims
    size = DTYPE_BYTES[profile.dtypes.get("diffusion_decoder", spec.dtype)]
    latent_frames = (job.frames - 1) // d["temporal"] + 1
    cell = d["spatial"] // d["dd_up_s"]  # pixels per stage-4 cell
    features = (latent_frames + d["dd_ghost"]) * d["dd_up_t"] * (job.height // cell) * (job.width // cell) * d["c4"]
    frames, height, width = job.frames, job.height, job.width
    if profile.vae_tiling:
        frames, height, width = (min(a, b) for a, b in zip((frames, height, width), DIFFUSION_TILE, strict=True))
    stage_5 = frames * (height // d["dd_patch"]) * (width // d["dd_patch"]) * d["c5"]
    video = job.frames * 3 * job.height * job.width
    return (features + DIFFUSION_WORKING * stage_5 + DIFFUSION_VIDEO_COPIES * video) * size / GB


def _phase_weights(comps: dict[str, Component], mode: str) -> dict[str, float]:
    """Weights on the device during each phase, in GB."""
    gb = {name: c.weight_bytes / GB for name, c in comps.items()}
    pinned = sum(gb.get(n, 0.0) for n in PINNED)
    phases = {"extend": ("prompt_llm",), "encode": ENCODE, "denoise": DENOISE, "decode": DECODE}
    if mode == "none":
        resident = sum(v for n, v in gb.items() if n != "prompt_llm")
        return {p: resident + (gb.get("prompt_llm", 0.0) if p == "extend" else 0.0) for p in phases}
    if mode == "model":  # one component at a time (diffusers' offload hooks chain them)
        return {p: pinned + max((gb.get(n, 0.0) for n in names), default=0.0) for p, names in phases.items()}
    streamed = 2 * max((c.largest_leaf_bytes for n, c in comps.items() if n not in DECODE), default=0) / GB
    resident = pinned + sum(gb.get(n, 0.0) for n in DECODE)
    return {p: resident + streamed for p in phases}


def phase_gb(
    spec: ModelSpec, profile: RuntimeProfile, comps: list[Component], job: JobShape, mode: str
) -> dict[str, float]:
    """Device memory in each phase of a job (weights on the device then, plus the phase's activations), in GB;
    what ``genworker simulate`` compares with the live bytes of a full-size run."""
    by_name = {c.name: c for c in comps}
    weights = _phase_weights(by_name, mode)
    work = {
        "encode": encode_gb(spec, by_name),
        "denoise": activation_gb(spec, by_name, job),
        "decode": decode_gb(spec, profile, by_name, job),
    }
    # Prompt extension is per job and optional: its peak is reported on its own (ModelPlan.extend_gb).
    return {p: weights[p] + work.get(p, 0.0) for p in weights if p != "extend"}


def peak_gb(spec: ModelSpec, profile: RuntimeProfile, comps: list[Component], job: JobShape, mode: str) -> float:
    return max(phase_gb(spec, profile, comps, job, mode).values())


# ------------------------------------------------------------------------------------------ the plan


def _largest_size(spec: ModelSpec, resolution: str) -> tuple[int, int]:
    """The generated size with the most pixels among the model's ratios (``generation_size``; an image job
    that keeps its image's aspect has at most that size's pixels)."""
    sizes = [generation_size(spec, resolution, ratio) for ratio in spec.ratios]
    return max(sizes, key=lambda s: s[0] * s[1])


def plan_model(spec: ModelSpec, profile: RuntimeProfile, device_gb: float, root: Path | None = None) -> ModelPlan:
    """The plan of one model on a ``device_gb`` device: a row per resolution at its longest duration."""
    if spec.tiny:
        return ModelPlan(spec.id, profile, device_gb, [], [], skipped="tiny CPU model: not planned")
    try:
        return _plan(spec, profile, device_gb, root)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError) as e:
        # A config this code cannot build or read (a newer family, a class this diffusers lacks): the model
        # is reported unplanned, like one without configs, instead of failing the command or the worker.
        reason = f"no plan: its arch config cannot be used here ({type(e).__name__}: {e}): not checked"
        return ModelPlan(spec.id, profile, device_gb, [], [], skipped=reason)


def _plan(spec: ModelSpec, profile: RuntimeProfile, device_gb: float, root: Path | None) -> ModelPlan:
    comps = load_components(spec, profile, root)
    if comps is None:
        reason = f"no arch config (configs/arch/{spec.id}/): not checked"
        return ModelPlan(spec.id, profile, device_gb, [], [], skipped=reason)
    usable = device_gb - reserve_gb(device_gb)
    rows = []
    for resolution in spec.resolutions:
        width, height = _largest_size(spec, resolution)

        def job(seconds: int, w: int = width, h: int = height) -> JobShape:
            frames = frames_for(seconds * spec.fps, spec.frame_rule.multiple, spec.frame_rule.offset)
            return JobShape(w, h, frames, seconds)

        longest = job(max(spec.durations))
        peaks = {mode: peak_gb(spec, profile, comps, longest, mode) for mode in OFFLOAD_MODES}
        fitting = [s for s in spec.durations if peak_gb(spec, profile, comps, job(s), profile.offload) <= usable]
        rows.append(
            SizeRow(
                resolution=resolution,
                width=width,
                height=height,
                seconds=longest.seconds,
                frames=longest.frames,
                peak_gb=peaks,
                verdict=_verdict(peaks, profile.offload, usable),
                max_seconds=max(fitting, default=0),
            )
        )
    by_name = {c.name: c for c in comps}
    extend = _phase_weights(by_name, profile.offload)["extend"] if "prompt_llm" in by_name else 0.0
    return ModelPlan(spec.id, profile, device_gb, comps, rows, extend_gb=extend)


def _verdict(peaks: dict[Offload, float], mode: Offload, usable: float) -> str:
    if peaks[mode] <= usable:
        return "fits"
    stronger = OFFLOAD_MODES[OFFLOAD_MODES.index(mode) + 1 :]
    for other in stronger:
        if peaks[other] <= usable:
            return f"needs offload ({other})"
    return "does not fit"


def device_memory_gb(device: str) -> float | None:
    """Total memory of a CUDA ``device`` in GB as the device reports it, or None off CUDA (the plan then lets
    everything through)."""
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return float(torch.cuda.get_device_properties(torch.device(device)).total_memory) / GB

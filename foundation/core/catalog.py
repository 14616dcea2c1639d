"""The model catalog (``configs/models.yaml``): what can be generated, how, and at what rate.

The catalog is data. It is validated at load time and a bad file fails with one message that names the
file, the model entry and the field, so an operator fixes it before any job runs.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from foundation.core.errors import CatalogError
from foundation.core.sizes import RATIOS, SIZE_TABLE

__all__ = [
    "GENERIC_ARGUMENTS",
    "LTX2_DISTILLED_STEPS",
    "MODE_INPUTS",
    "Catalog",
    "CatalogError",
    "DecodeSpec",
    "DiffusersSpec",
    "FrameRule",
    "ModeSpec",
    "ModelSpec",
    "PromptExtendSpec",
    "Rates",
    "RuntimeProfile",
    "SamplerSpec",
    "TwoStageSpec",
    "VariantSpec",
    "config_dir",
    "default_catalog_path",
    "load_catalog",
    "mode_inputs",
]

_Forbid = ConfigDict(extra="forbid", frozen=True)
PositiveDecimal = Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=6)]
DType = Literal["float32", "bfloat16", "float16"]

# What each mode takes in a create request's ``input``: the API refuses an input its mode does not take
# and a missing one it needs (400), and ``GET /v1/models`` shows it per mode. "image" is one image, given as
# ``input.image_url`` or ``input.image`` (a data URI). A mode not named here takes the prompt only.
MODE_INPUTS: dict[str, tuple[str, ...]] = {
    "text_to_video": ("prompt",),
    "image_to_video": ("prompt", "image"),
}


def mode_inputs(mode: str) -> tuple[str, ...]:
    """The inputs ``mode`` needs (``MODE_INPUTS``; the prompt only for a mode not listed there)."""
    return MODE_INPUTS.get(mode, ("prompt",))


# LTX-2's distilled stage 1 runs exactly the 8 pre-trained sigmas (DISTILLED_SIGMA_VALUES in diffusers'
# pipelines/ltx2/utils.py, from Lightricks/LTX-2 ltx_pipelines/utils/constants.py DISTILLED_SIGMAS).
LTX2_DISTILLED_STEPS = 8


class FrameRule(BaseModel):
    """Valid generated frame counts are ``multiple * k + offset`` (Wan: 4k+1, LTX-2: 8k+1)."""

    model_config = _Forbid

    multiple: Annotated[int, Field(ge=1, le=64)]
    offset: Annotated[int, Field(ge=0, le=64)] = 1


class CacheSpec(BaseModel):
    """A cache-accelerated recipe (diffusers' own hooks on the denoising transformers, ``pipelines.runtime.profile``).

    ``taylorseer`` (TaylorSeer's lite mode): the transformer blocks run on the first ``warmup_steps`` steps and
    then every ``interval``-th one; on the others they are skipped and the output projection is predicted by
    a Taylor expansion (a fixed schedule: the saved compute is known in advance). ``first_block``: the first
    block always runs; the rest are skipped while its output changed by less than ``threshold`` (relative)
    since the step that last ran them.
    Not bit-exact against the uncached recipe; a resumed job's cache restarts at the resumed step.
    """

    model_config = _Forbid

    kind: Literal["taylorseer", "first_block"]
    interval: Annotated[int, Field(ge=2, le=50)] = 5  # taylorseer: diffusers' default
    warmup_steps: Annotated[int, Field(ge=1, le=50)] = 3  # taylorseer: diffusers' default
    threshold: Annotated[float, Field(gt=0.0, le=1.0)] = 0.05  # first_block: diffusers' default


class LoraSpec(BaseModel):
    """A LoRA a variant runs with (a step-distillation LoRA: few steps, no CFG). Loaded with the model, under
    the variant's name, switched off; on for that variant's jobs only (``pipelines.runtime.profile.apply_lora``).

    A two-expert model (Wan 2.2 A14B) takes one LoRA per expert: ``weight_name`` goes into the high-noise
    ``transformer`` and ``weight_name_2`` into the low-noise ``transformer_2``, under the same adapter name."""

    model_config = _Forbid

    weights: str  # hub repo id or local directory (a tiny model's directory name for tiny models)
    weight_name: str  # the .safetensors file in it
    weight_name_2: str | None = None  # two experts: the file for ``transformer_2`` (Wan 2.2's low-noise expert)
    revision: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None = None  # hub commit; None = unpinned
    scale: Annotated[float, Field(gt=0.0, le=2.0)] = 1.0
    # Keys of the file (fnmatch patterns) that diffusers' conversion may drop: named on purpose, after checking
    # upstream does without them. Any other drop refuses the LoRA at load (pipelines.runtime.profile).
    dropped_keys: tuple[str, ...] = ()


class SamplerSpec(BaseModel):
    """The solver a variant samples with where it differs from the checkpoint's own (a Wan ``UniPCMultistepScheduler``,
    solver order 2 with its corrector). The Wan adapters rebuild the shipped scheduler with it for the variant's jobs.

    A step-distilled recipe (lightx2v's 4-step LoRAs) is trained for a first-order flow-Euler step: ``solver_order: 1``
    with ``corrector: false`` on every step is exactly that update (``pipelines.families.wan``)."""

    model_config = _Forbid

    solver_order: Annotated[int, Field(ge=1, le=3)]
    corrector: bool = True  # False: UniC's corrector off on every step (disable_corrector = all step indices)


class VariantSpec(BaseModel):
    """A recipe: steps and guidance, plus family-specific pipeline knobs in ``pipeline_kwargs``."""

    model_config = _Forbid

    steps: Annotated[int, Field(ge=1, le=1000)]
    guidance_scale: Annotated[float, Field(ge=0.0, le=50.0)]
    guidance_scale_2: Annotated[float, Field(ge=0.0, le=50.0)] | None = None
    flow_shift: Annotated[float, Field(gt=0.0, le=100.0)] | None = None
    # Price multiplier relative to the model's base rates (a cheaper recipe may cost less).
    rate_multiplier: PositiveDecimal = Decimal("1")
    # Family-specific options for the pipeline call (e.g. LTX-2's stg_scale): keys of FAMILY_OPTIONS[family],
    # checked by ModelSpec, which knows the family.
    pipeline_kwargs: dict[str, Any] = Field(default_factory=dict)
    cache: CacheSpec | None = None  # a cache-accelerated recipe (priced with its own rate_multiplier)
    lora: LoraSpec | None = None  # a LoRA recipe (Wan family), e.g. a 4-step distillation LoRA
    sampler: SamplerSpec | None = None  # a solver other than the checkpoint's (Wan family), e.g. first-order Euler


class ModeSpec(BaseModel):
    model_config = _Forbid

    variants: dict[str, VariantSpec]

    @model_validator(mode="after")
    def _has_variants(self) -> ModeSpec:
        if not self.variants:
            raise ValueError("a mode needs at least one variant")
        return self


class PromptExtendSpec(BaseModel):
    """How ``prompt_extend`` works for a model: its own text encoder, or a chat LLM from the catalog."""

    model_config = _Forbid

    method: Literal["text_encoder", "chat_llm"]
    llm: str | None = None  # hub id or local path of the chat LLM (method chat_llm)
    llm_revision: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None = None  # hub commit of ``llm``
    # chat_llm: whose official system prompts the LLM gets, by upstream task (Wan 2.1's LM_*; Wan 2.2's T2V_A14B_*,
    # I2V_A14B_*, TI2V-5B's pair: pipelines.families.system_prompts), and in which language (upstream's default: zh).
    system_prompt: Literal["wan2.1", "wan2.2-t2v-a14b", "wan2.2-i2v-a14b", "wan2.2-ti2v-5b"] | None = None
    language: Literal["en", "zh"] = "en"
    max_new_tokens: Annotated[int, Field(ge=1, le=4096)] = 256
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0

    @model_validator(mode="after")
    def _llm_named(self) -> PromptExtendSpec:
        if self.method == "chat_llm" and not self.llm:
            raise ValueError("method chat_llm needs 'llm' (hub id or local path)")
        if (self.method == "chat_llm") != (self.system_prompt is not None):
            raise ValueError("method chat_llm needs 'system_prompt' (whose official prompts), and only it")
        return self


class RuntimeProfile(BaseModel):
    """How a model runs on its device: the dtype of each component, attention kernel, offload, VAE tiling and
    compilation. It belongs to the model, not the worker, so one worker can host models that need different
    settings; a worker may replace fields per model (``models.profile_overrides``), checked the same way.
    """

    model_config = _Forbid

    # Component (pipeline attribute) -> dtype; components not named run in the model's ``dtype``.
    dtypes: dict[str, DType] = Field(default_factory=dict)
    # A diffusers attention backend for the denoising transformers; None = torch SDPA's own dispatch.
    attention_backend: str | None = None
    # none: everything resident; model: each component visits the GPU only while it runs; group: leaf groups
    # of the transformers stream in with the compute (slowest, least memory).
    offload: Literal["none", "model", "group"] = "none"
    vae_tiling: bool = False  # decode in tiles: bounded decode memory at 720p and above
    compile: bool = False  # regional torch.compile of the repeated transformer blocks
    # FP8 for the denoising transformers. storage: weights kept in float8_e4m3fn and cast per layer to the
    # compute dtype as each layer runs (diffusers layerwise casting; any device; ~half the bf16 weight
    # memory). compute: float8 matmuls (torchao dynamic float8), Ada/Hopper and newer only, refused elsewhere.
    fp8: Literal["none", "storage", "compute"] = "none"
    notes: str = ""  # why this profile, with its sources (docs/gpu.md)


# The call arguments the generic adapter fills from the job, under their usual names; ``diffusers.arguments``
# renames those a pipeline calls otherwise (``num_frames: num_video_frames``). ``image`` goes to an
# image_to_video entry's pipeline only.
GENERIC_ARGUMENTS: frozenset[str] = frozenset(
    {"prompt", "negative_prompt", "height", "width", "num_frames", "num_inference_steps", "guidance_scale", "image"}
)


class DecodeSpec(BaseModel):
    """How the generic adapter turns denoised latents into frames (the pipeline stops at ``output_type="latent"``):

    - ``scaling_factor``: ``vae.decode(latents / vae.config.scaling_factor)`` (HunyuanVideo 1.5);
    - ``mean_std``: ``vae.decode(latents * latents_std + latents_mean)`` from the VAE config (the Wan layout);
    - ``method``: the pipeline's own method named ``method`` (CogVideoX's ``decode_latents``), which must return
      the video as (1, C, F, H, W) in [-1, 1].
    """

    model_config = _Forbid

    kind: Literal["scaling_factor", "mean_std", "method"] = "scaling_factor"
    method: Annotated[str, Field(pattern=r"^[A-Za-z_]\w*$")] | None = None

    @model_validator(mode="after")
    def _method_named(self) -> DecodeSpec:
        if (self.kind == "method") != (self.method is not None):
            raise ValueError("decode.method is required with kind 'method' and only with it")
        return self


class DiffusersSpec(BaseModel):
    """What the generic adapter (``pipelines.families.generic:DiffusersTextToVideo``) needs to drive one diffusers
    text-to-video pipeline: its class, the call-argument names where they differ, how guidance is set, the
    components a runtime profile may give a dtype, the repeated-block denoisers, the variant options it takes
    and the decode path. Data only: nothing here imports diffusers (tests check it against the class)."""

    model_config = _Forbid

    pipeline: Annotated[str, Field(pattern=r"^[A-Z]\w*Pipeline$")]  # a class exported by ``diffusers``
    # Our argument name -> the pipeline's (only where they differ); a name mapped to "" is not passed at all.
    arguments: dict[str, Annotated[str, Field(pattern=r"^(|[a-z_]\w*)$")]] = Field(default_factory=dict)
    # argument: CFG is the call's ``guidance_scale``; guider: the pipeline's ``guider`` component carries it
    # (HunyuanVideo 1.5), and the adapter replaces the guider with the variant's scale.
    guidance: Literal["argument", "guider"] = "argument"
    components: list[str] = Field(default_factory=list)  # names a runtime profile may give a dtype
    denoisers: list[str] = Field(default_factory=lambda: ["transformer"])  # attention backend / compile targets
    attention_mask: bool = False  # its transformer passes a text mask on every step (refuses flash/sage kernels)
    # "module:Class" of an attention processor put in place of the denoisers' own at load (each processor that is
    # an instance of its ``replaces``): HunyuanVideo 1.5's, without the dense L x L mask
    # (pipelines/families/hunyuan15.py).
    attention_processor: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")] | None = None
    # "module:Class" of a video processor put in place of the pipeline's own at load (built from its config): for
    # an image-to-video pipeline that sizes the video from the image, one that keeps the size the worker fitted
    # the image to (HunyuanVideo 1.5's re-buckets it, off by a stride on some ratios: pipelines/families/hunyuan15.py).
    video_processor: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")] | None = None
    options: list[str] = Field(default_factory=list)  # keys a variant may set in pipeline_kwargs (call keywords)
    decode: DecodeSpec = Field(default_factory=DecodeSpec)

    @field_validator("arguments")
    @classmethod
    def _known_arguments(cls, arguments: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(arguments) - GENERIC_ARGUMENTS)
        if unknown:
            raise ValueError(f"arguments renames {unknown}; only {sorted(GENERIC_ARGUMENTS)} are filled from a job")
        return arguments

    @model_validator(mode="after")
    def _consistent(self) -> DiffusersSpec:
        if not self.denoisers:
            raise ValueError("denoisers must name at least one component (the transformer)")
        clash = sorted(set(self.options) & (GENERIC_ARGUMENTS | set(self.arguments.values()) | _ADAPTER_ARGUMENTS))
        if clash:
            raise ValueError(f"options {clash} are set from the job by the adapter, not by a variant")
        return self

    def call_name(self, argument: str) -> str:
        """The pipeline's keyword for one of ``GENERIC_ARGUMENTS`` ("" when the pipeline takes none)."""
        return self.arguments.get(argument, argument)


# Keywords the generic adapter always sets itself.
_ADAPTER_ARGUMENTS = frozenset({"generator", "output_type", "callback_on_step_end", "return_dict", "latents"})


class TwoStageSpec(BaseModel):
    """LTX-2's production recipe (Lightricks ``ti2vid_two_stages.py``): stage 1 at half the size, the latent
    x2 upsampler, then a short refinement at full size with the distilled LoRA and CFG off.

    A distilled checkpoint (LTX-2.5's ``transformer/``, Lightricks ``distilled.py``) has no LoRA: every variant of
    it runs the distilled recipe, and ``distilled_sampler`` says how its stage 1 steps."""

    model_config = _Forbid

    upsampler: str = "latent_upsampler"  # subfolder of the weights holding LTX2LatentUpsamplerModel
    # LoRA weight file in the weights (``load_lora_weights(weight_name=...)``); None: the checkpoint is distilled.
    distilled_lora: str | None
    lora_scale: Annotated[float, Field(gt=0, le=2)] = 1.0
    # The LoRA's rank, which the memory plan and the simulation size it by (they have no file): LTX-2.0's
    # ltx-2-19b-distilled-lora-384 is 384, LTX-2.5's ltx-2.5-22b-distilled-lora-450 450.
    lora_rank: Annotated[int, Field(ge=1, le=4096)] = 384
    refine_sigmas: Annotated[list[Annotated[float, Field(gt=0, le=1)]], Field(min_length=1)]
    # The distilled stage 1's step: euler, or ltx-core's ancestral Euler at eta 1 (``EulerAncestralDiffusionStep``),
    # which ``distilled.py`` runs from LTX-2.5 on. The refinement is always plain Euler, as upstream's.
    distilled_sampler: Literal["euler", "ancestral"] = "euler"


class CheckpointPolicy(BaseModel):
    """How often a worker checkpoints this model's denoising loop (``pipelines.runtime.resume``), so a re-delivered
    job resumes instead of starting over: after every ``every_steps`` steps, or once ``every_s`` seconds of
    denoising passed since the last one, whichever comes first (either may be off, not both).

    The default, 30 s, keeps the write's cost on the GPU thread (a device-to-host copy of the latents and the
    solver history: milliseconds; serializing and uploading run on another thread) far under 1 % of the
    time between checkpoints, and bounds what a crash loses to 30 s plus one step."""

    model_config = _Forbid

    every_steps: Annotated[int, Field(ge=1)] | None = None
    every_s: Annotated[float, Field(gt=0)] | None = 30.0

    @model_validator(mode="after")
    def _one_cadence(self) -> CheckpointPolicy:
        if self.every_steps is None and self.every_s is None:
            raise ValueError("set every_steps or every_s (or both)")
        return self


class Rates(BaseModel):
    """Customer rates: USD per output second, by resolution label, plus a per-second audio surcharge."""

    model_config = _Forbid

    currency: Literal["USD"] = "USD"
    per_second: dict[str, PositiveDecimal]
    audio_per_second: PositiveDecimal = Decimal("0")


class ModelSpec(BaseModel):
    model_config = _Forbid

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    display_name: str
    family: Literal["wan", "ltx2", "diffusers"]
    adapter: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]
    weights: str  # hub id or local path; a relative path is resolved against the tiny-model dir
    # The hub commit every from_pretrained of ``weights`` loads (40 hex digits); None = unpinned, which
    # `genworker plan` reports. Never a branch name: a moving branch is what pinning avoids.
    revision: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None = None
    tiny: bool = False  # built offline by scripts/make_tiny_models.py
    # A tiny entry: the ids of the real entries it stands for on CPU. It offers at least what each of them offers
    # (modes, variant kinds, durations, ratios, audio, prompt extension) at tiny sizes, so tests run every choice a
    # client has on the real model. Read by tests only (tests/unit/test_tiny_width.py holds the shipped catalog to
    # it); the worker and the API ignore it, so an entry copied into another catalog keeps working.
    stands_for: list[str] = Field(default_factory=list)
    fps: Annotated[int, Field(ge=1, le=120)]
    frame_rule: FrameRule
    stride: Annotated[int, Field(ge=2, le=256)]
    # Generation sizes (width, height) by resolution and ratio where the model's upstream lists one other than the
    # target rounded up to the stride (Wan 2.2 TI2V-5B's 720p is 1280x704): within one stride of the target on
    # each side; the encoder scales what is below the target (foundation.media.frames.output_box).
    generation_sizes: dict[str, dict[str, tuple[int, int]]] = Field(default_factory=dict)
    # How an image_to_video job's generation size follows its input image (foundation.core.sizes):
    # crop: the text size, the image cropped to it (LTX-2's ltx_pipelines media_io resize_and_center_crop);
    # max_area: the image's aspect at the text size's area, sides floored to the stride (Wan 2.1/2.2 I2V);
    # best_output_size: of the stride-grid sizes within that area, the nearest aspect (Wan 2.2 TI2V-5B).
    image_fit: Literal["crop", "max_area", "best_output_size"] = "crop"
    resolutions: list[str]
    ratios: list[str]
    durations: list[Annotated[int, Field(ge=1, le=120)]]
    defaults: dict[str, Any]
    audio: bool = False
    prompt_extend: PromptExtendSpec | None = None
    prompt_max_chars: Annotated[int, Field(ge=1, le=100_000)] = 2000
    negative_prompt: str = ""
    max_job_seconds: Annotated[float, Field(gt=0)] = 3600.0
    # Operator sizing hints: resident GPU memory and public per-job GPU seconds at the default size.
    gpu_memory_gb: Annotated[float, Field(ge=0)] = 0.0
    est_gpu_seconds_per_job: Annotated[float, Field(ge=0)] = 0.0
    dtype: DType = "bfloat16"
    runtime: RuntimeProfile = Field(default_factory=RuntimeProfile)
    two_stage: TwoStageSpec | None = None  # LTX-2 only: the production two-stage recipe
    # LTX-2 only: the subfolder of the weights holding an ``LTX2VideoDiffusionDecoderModel`` (LTX-2.5's diffusion
    # video decoder), which decodes the video in place of the VAE's convolutional decoder (the VAE still encodes).
    diffusion_decoder: str | None = None
    # LTX-2 only: the subfolder of the weights holding the denoising transformer when it is not the one
    # ``model_index.json`` names (LTX-2.5-Diffusers' full model in ``transformer_full/``; ``transformer/`` is the
    # distilled one): loaded from there in its place, and the other is never pulled.
    transformer: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")] | None = None
    # A super-resolution stage after denoising (HunyuanVideo 1.5's upstream default: a separate step-distilled SR
    # transformer and upsampler, 480p -> 720p, 720p -> 1080p). No adapter implements one, and diffusers 0.42.1 has
    # no HunyuanVideo 1.5 SR pipeline or component: only false is accepted until one does (docs/gpu.md).
    super_resolution: bool = False
    checkpoints: CheckpointPolicy = Field(
        default_factory=CheckpointPolicy
    )  # resume mid-denoise (pipelines.runtime.resume)
    # Family "diffusers" only: the pipeline the generic adapter drives and how (pipelines/families/generic.py).
    diffusers: DiffusersSpec | None = None
    rates: Rates
    modes: dict[str, ModeSpec]

    @model_validator(mode="after")
    def _runnable(self) -> ModelSpec:
        """The runtime profile and the recipe fit the family (nothing accepted and then ignored)."""
        if (self.family == "diffusers") != (self.diffusers is not None):
            raise ValueError("family 'diffusers' needs a diffusers block (the generic adapter's data), and only it")
        if self.family == "diffusers" and len(self.modes) != 1:
            # One pipeline class per entry, so one call shape: a checkpoint with both modes is two entries.
            raise ValueError("modes: a generic entry serves one mode, its pipeline's (text_to_video or image_to_video)")
        if self.family == "diffusers" and self.prompt_extend is not None:
            raise ValueError("prompt_extend: the generic adapter has no prompt extension (a custom adapter may)")
        chat_llm = self.prompt_extend is not None and self.prompt_extend.method == "chat_llm"
        if chat_llm and "image_to_video" in self.modes:
            # Upstream extends image prompts with a vision-language model that sees the image (Qwen2.5-VL).
            raise ValueError("prompt_extend: a chat LLM reads text only and this model takes images (image_to_video)")
        if self.super_resolution:
            raise ValueError(
                "super_resolution: no adapter runs a super-resolution stage (diffusers 0.42.1 has none for "
                "HunyuanVideo 1.5); set it false"
            )
        if self.two_stage is not None:
            if self.family != "ltx2":
                raise ValueError(f"two_stage is LTX-2's recipe; family {self.family!r} has none")
            if self.stride % 64:
                raise ValueError("two_stage needs stride 64: stage 1 runs at half the size, on LTX-2's 32 stride")
        if self.diffusion_decoder is not None and self.family != "ltx2":
            raise ValueError(f"diffusion_decoder is LTX-2.5's video decoder; family {self.family!r} has none")
        if self.transformer is not None and self.family != "ltx2":
            raise ValueError(f"transformer: family {self.family!r} loads its transformer from model_index.json only")
        for mode_name, mode in self.modes.items():
            for name, variant in mode.variants.items():
                where = f"{mode_name}.variants.{name}"
                if self.family == "ltx2" and (variant.flow_shift is not None or variant.guidance_scale_2 is not None):
                    raise ValueError(f"{where}: flow_shift and guidance_scale_2 are Wan's; LTX-2 would ignore them")
                if self.family == "diffusers" and variant.guidance_scale_2 is not None:
                    raise ValueError(f"{where}: guidance_scale_2 is Wan 2.2's; the generic adapter has one denoiser")
                if variant.lora is not None:
                    _check_lora(where, self.family, variant)
                if variant.sampler is not None and self.family != "wan":
                    raise ValueError(
                        f"{where}: sampler rebuilds the Wan adapters' UniPC scheduler; family {self.family!r} would "
                        "ignore it"
                    )
                distilled = bool(variant.pipeline_kwargs.get("distilled"))
                if distilled:
                    if self.two_stage is None:
                        raise ValueError(f"{where}: distilled needs the model's two_stage (its LoRA)")
                    if variant.steps != LTX2_DISTILLED_STEPS:
                        raise ValueError(f"{where}: distilled runs exactly {LTX2_DISTILLED_STEPS} steps")
                elif self.two_stage is not None and self.two_stage.distilled_lora is None:
                    raise ValueError(f"{where}: the checkpoint is distilled (two_stage has no LoRA): set distilled")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        for label in self.resolutions:
            if label not in SIZE_TABLE:
                raise ValueError(f"resolution {label!r} is not in the size table {sorted(SIZE_TABLE)}")
            if label not in self.rates.per_second:
                raise ValueError(f"rates.per_second has no rate for resolution {label!r}")
        for ratio in self.ratios:
            if ratio not in RATIOS:
                raise ValueError(f"ratio {ratio!r} is not one of {list(RATIOS)}")
        if not (self.resolutions and self.ratios and self.durations and self.modes):
            raise ValueError("resolutions, ratios, durations and modes must not be empty")
        self._check_generation_sizes()
        if self.image_fit != "crop" and "image_to_video" not in self.modes:
            raise ValueError(f"image_fit {self.image_fit!r} fits input images; the model has no image_to_video mode")
        allowed_defaults = {"resolution", "ratio", "duration_seconds", "audio", "prompt_extend"}
        unknown = set(self.defaults) - allowed_defaults
        if unknown:
            raise ValueError(f"defaults has unknown keys {sorted(unknown)}")
        if self.defaults.get("resolution") not in self.resolutions:
            raise ValueError("defaults.resolution must be one of resolutions")
        if self.defaults.get("ratio") not in self.ratios:
            raise ValueError("defaults.ratio must be one of ratios")
        if self.defaults.get("duration_seconds") not in self.durations:
            raise ValueError("defaults.duration_seconds must be one of durations")
        if self.defaults.get("audio", False) and not self.audio:
            raise ValueError("defaults.audio is true but the model has no audio")
        if self.defaults.get("prompt_extend", False) and self.prompt_extend is None:
            raise ValueError("defaults.prompt_extend is true but the model has no prompt_extend")
        return self

    def _check_generation_sizes(self) -> None:
        for label, by_ratio in self.generation_sizes.items():
            for ratio, (width, height) in by_ratio.items():
                where = f"generation_sizes.{label}.{ratio}"
                if label not in self.resolutions or ratio not in self.ratios:
                    raise ValueError(f"{where}: {label} {ratio} is not offered by the model")
                if width % self.stride or height % self.stride:
                    raise ValueError(f"{where}: {width}x{height} is not on the model's stride {self.stride}")
                target_w, target_h = SIZE_TABLE[label][ratio]
                # One stride off is upstream's own rounding (HunyuanVideo 1.5's buckets: 848x480 for 832x480).
                if abs(width - target_w) > self.stride or abs(height - target_h) > self.stride:
                    raise ValueError(f"{where}: {width}x{height} is more than a stride from {target_w}x{target_h}")


class Catalog(BaseModel):
    model_config = _Forbid

    models: dict[str, ModelSpec]
    source: str = "<memory>"

    def get(self, model_id: str) -> ModelSpec | None:
        return self.models.get(model_id)


def _check_lora(where: str, family: str, variant: VariantSpec) -> None:
    """A variant LoRA is loaded by the Wan adapters only, and a second expert's file needs a second expert."""
    if family != "wan":
        raise ValueError(f"{where}: lora is loaded by the Wan adapters only; family {family!r} would ignore it")
    lora = variant.lora
    if lora is not None and lora.weight_name_2 is not None and "boundary_ratio" not in variant.pipeline_kwargs:
        raise ValueError(
            f"{where}: lora.weight_name_2 is the second expert's LoRA; a variant without boundary_ratio runs one"
        )


def config_dir() -> Path:
    """The ``configs/`` folder (the catalog, ``arch/``): inside this package in an installed wheel (pyproject.toml
    force-includes it there, so a worker finds it whatever its working directory), else the checkout's own."""
    here = Path(__file__).resolve().parent
    packaged = here / "configs"
    return packaged if packaged.is_dir() else here.parents[1] / "configs"


def default_catalog_path() -> Path:
    return config_dir() / "models.yaml"


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


def _quote_hint(error: Any) -> str:
    """A text field that YAML read as a number (an all-digit ``revision``, say) is fixed by quoting it; the bare
    "Input should be a valid string" does not say so."""
    value = error.get("input")
    if error["type"] == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        return f"; YAML read {value!r} as a number: quote it ('{value}')"
    return ""


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load and validate a catalog file; raise ``CatalogError`` naming file, entry and field."""
    path = Path(path) if path is not None else default_catalog_path()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise CatalogError(f"{path}: cannot read catalog: {e}") from e
    if not isinstance(raw, dict) or not isinstance(raw.get("models"), list):
        raise CatalogError(f"{path}: expected a mapping with a 'models' list")
    # Top-level keys other than 'models' must be YAML anchors' holders named 'x-...'.
    stray = [k for k in raw if k != "models" and not str(k).startswith("x-")]
    if stray:
        raise CatalogError(f"{path}: unknown top-level keys {stray} (only 'models' and 'x-*' anchors)")
    models: dict[str, ModelSpec] = {}
    for index, entry in enumerate(raw["models"]):
        name = entry.get("id", f"#{index}") if isinstance(entry, dict) else f"#{index}"
        try:
            spec = ModelSpec.model_validate(entry)
        except ValidationError as e:
            first = e.errors()[0]
            raise CatalogError(
                f"{path}: model {name!r}: field {_field_path(first['loc'])!r}: {first['msg']}{_quote_hint(first)}"
                + (f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else "")
            ) from e
        if spec.id in models:
            raise CatalogError(f"{path}: model {spec.id!r}: field 'id': duplicate model id")
        models[spec.id] = spec
    if not models:
        raise CatalogError(f"{path}: the catalog lists no models")
    return Catalog(models=models, source=str(path))

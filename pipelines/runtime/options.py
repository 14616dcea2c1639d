"""What each model family accepts, as data checked against a catalog before any model loads: the options of a
variant's ``pipeline_kwargs``, the components a runtime profile may give a dtype, whether the family's transformer
passes an attention mask, and diffusers' attention backends (and those that refuse a mask).

The catalog (``foundation.core.catalog``) checks an entry's structure and is all the API reads; what only the
model layer knows is checked here, by ``check_catalog``, wherever a catalog meets models: a worker's start,
``genworker generate``, ``genworker catalog`` and ``genworker plan`` (``load_model_catalog``), and by
``runtime_profile`` for a worker's profile overrides. Nothing here imports diffusers or torch.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from foundation.core.catalog import Catalog, DiffusersSpec, ModelSpec, RuntimeProfile, load_catalog
from foundation.core.errors import CatalogError

__all__ = [
    "ATTENTION_BACKENDS",
    "FAMILY_COMPONENTS",
    "FAMILY_OPTIONS",
    "FAMILY_USES_ATTENTION_MASK",
    "MASK_REJECTING_BACKENDS",
    "check_catalog",
    "check_model",
    "check_profile",
    "load_model_catalog",
]

# The options each family's adapter accepts in a variant's ``pipeline_kwargs``. Kept here as data so a typo is
# refused before any adapter is imported; tests/pipelines/test_options.py holds every adapter to this table,
# so the two cannot drift.
FAMILY_OPTIONS: dict[str, frozenset[str]] = {
    "wan": frozenset({"boundary_ratio", "max_sequence_length"}),
    # The generic adapter (pipelines/families/generic.py): each entry lists its options in ``diffusers.options``.
    "diffusers": frozenset(),
    "ltx2": frozenset(
        {
            "audio_guidance_rescale",
            "audio_guidance_scale",
            "audio_modality_scale",
            "audio_stg_scale",
            "decode_noise_scale",
            "decode_timestep",
            "distilled",
            "guidance_rescale",
            "max_sequence_length",
            "modality_scale",
            "spatio_temporal_guidance_blocks",
            "stg_scale",
            "use_cross_timestep",
        }
    ),
}


# diffusers' attention backends (``AttentionBackendName`` values, diffusers 0.42.1), and those whose kernel
# raises ``ValueError: `attn_mask` is not supported`` when given a mask (flash-attn 2/3/4 and their hub
# kernels, sage, torch's flash-only SDPA, XLA). The varlen kernels turn a padding mask into sequence
# lengths and accept it. tests/pipelines/test_profiles.py reads both sets back from diffusers' source.
ATTENTION_BACKENDS: frozenset[str] = frozenset(
    {
        "_flash_3", "_flash_3_hub", "_flash_3_varlen_hub", "_flash_varlen_3", "_native_cudnn", "_native_efficient",
        "_native_flash", "_native_math", "_native_npu", "_native_xla", "_sage_qk_int8_pv_fp16_cuda",
        "_sage_qk_int8_pv_fp16_triton", "_sage_qk_int8_pv_fp8_cuda", "_sage_qk_int8_pv_fp8_cuda_sm90",
        "aiter_fa2_hub", "flash", "flash_4_hub", "flash_hub", "flash_varlen", "flash_varlen_hub", "flex", "native",
        "sage", "sage_blackwell_hub", "sage_hub", "sage_varlen", "xformers",
    }
)  # fmt: skip
MASK_REJECTING_BACKENDS: frozenset[str] = frozenset(
    {
        "_flash_3", "_flash_3_hub", "_native_flash", "_native_xla", "_sage_qk_int8_pv_fp16_cuda",
        "_sage_qk_int8_pv_fp16_triton", "_sage_qk_int8_pv_fp8_cuda", "_sage_qk_int8_pv_fp8_cuda_sm90",
        "aiter_fa2_hub", "flash", "flash_4_hub", "flash_hub", "sage", "sage_blackwell_hub", "sage_hub",
    }
)  # fmt: skip
# Whether a family's transformer passes an attention mask on every step: LTX-2's cross-attention always
# masks the padded text tokens; Wan attends without masks.
# Generic entries say it in ``diffusers.attention_mask``.
FAMILY_USES_ATTENTION_MASK: dict[str, bool] = {"wan": False, "ltx2": True, "diffusers": False}
# The pipeline components a runtime profile may give a dtype of their own.
FAMILY_COMPONENTS: dict[str, frozenset[str]] = {
    "wan": frozenset({"transformer", "transformer_2", "text_encoder", "image_encoder", "vae"}),  # image: Wan 2.1 I2V
    "ltx2": frozenset(
        {
            "transformer",
            "text_encoder",
            "connectors",
            "vae",
            "audio_vae",
            "vocoder",
            "latent_upsampler",
            "diffusion_decoder",
        }
    ),
    "diffusers": frozenset(),  # generic entries name theirs in ``diffusers.components``
}


def check_profile(family: str, profile: RuntimeProfile, diffusers: DiffusersSpec | None = None) -> None:
    """Refuse a profile its family cannot run, with the reason (``ValueError``); a generic entry's facts come
    from its ``diffusers`` block."""
    masks = diffusers.attention_mask if diffusers is not None else FAMILY_USES_ATTENTION_MASK[family]
    components = frozenset(diffusers.components) if diffusers is not None else FAMILY_COMPONENTS[family]
    backend = profile.attention_backend
    if backend is not None and backend not in ATTENTION_BACKENDS:
        close = difflib.get_close_matches(backend, ATTENTION_BACKENDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"attention_backend {backend!r} is not a diffusers attention backend{hint}")
    if backend in MASK_REJECTING_BACKENDS and masks:
        raise ValueError(
            f"attention_backend {backend!r} rejects attention masks and family {family!r} passes one on every "
            "step (its kernel raises `attn_mask` is not supported); use 'native', '_native_cudnn', "
            "'_native_efficient' or a varlen backend"
        )
    unknown = sorted(set(profile.dtypes) - components)
    if unknown:
        raise ValueError(
            f"dtypes names {unknown}, not components of family {family!r} ({', '.join(sorted(components))})"
        )


def check_model(spec: ModelSpec) -> None:
    """Refuse an entry its family cannot run (``ValueError`` starting with the field's path): a
    ``pipeline_kwargs`` key the family does not take, or a runtime profile it cannot use."""
    allowed = frozenset(spec.diffusers.options) if spec.diffusers is not None else FAMILY_OPTIONS[spec.family]
    for mode_name, mode in spec.modes.items():
        for variant_name, variant in mode.variants.items():
            for key in variant.pipeline_kwargs:
                if key not in allowed:
                    where = f"modes.{mode_name}.variants.{variant_name}.pipeline_kwargs"
                    raise ValueError(f"{where}: {_unknown_option(key, spec.family, allowed)}")
    try:
        check_profile(spec.family, spec.runtime, spec.diffusers)
    except ValueError as e:
        raise ValueError(f"runtime: {e}") from None


def check_catalog(catalog: Catalog) -> None:
    """``check_model`` for every entry; ``CatalogError`` naming the file, the model and the field."""
    for spec in catalog.models.values():
        try:
            check_model(spec)
        except ValueError as e:
            raise CatalogError(f"{catalog.source}: model {spec.id!r}: field {e}") from None


def load_model_catalog(path: str | Path | None = None) -> Catalog:
    """The catalog at ``path`` (default: the shipped one), checked as the models will run it."""
    catalog = load_catalog(path)
    check_catalog(catalog)
    return catalog


def _unknown_option(key: str, family: str, allowed: frozenset[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r} for family {family!r} ({hint}allowed: {', '.join(sorted(allowed))})"

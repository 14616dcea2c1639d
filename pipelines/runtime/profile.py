"""A model's runtime profile: how it sits on a device (attention backend, FP8, compile, VAE tiling, offload), and
the job's cache recipe on its denoisers.

GPU knobs come from the model's runtime profile (catalog ``runtime``, with the worker's ``profile_overrides``);
offloading is skipped off CUDA, so a CPU run places the pipeline with ``pipe.to("cpu")``. Which recipe a denoiser's
cache hooks were built for is kept here, in a table keyed by the module (weakly: it goes with the module), never
as an attribute on diffusers' modules.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from foundation.core.catalog import RuntimeProfile
from pipelines.errors import ModelLoadError
from pipelines.runtime.compile import compile_blocks
from pipelines.runtime.options import check_profile

if TYPE_CHECKING:
    from foundation.core.catalog import CacheSpec, ModelSpec
    from foundation.settings.models import ModelRuntimeSettings

__all__ = [
    "apply_cache",
    "apply_fp8",
    "apply_profile",
    "quiet_progress_bars",
    "runtime_profile",
    "use_attention_backend",
]

log = logging.getLogger("genworker.pipelines")

# The cache recipe (its JSON, None for none) each denoiser's diffusers cache hooks were set up for.
_CACHE_RECIPES: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def quiet_progress_bars() -> None:
    """No tqdm bars from loading or denoising: the worker reports progress on the record, not stderr. A disabled
    bar still starts tqdm's monitor thread (it polls every bar every 10 s) unless its interval is 0."""
    import diffusers
    import tqdm
    import transformers

    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()
    tqdm.tqdm.monitor_interval = 0


def runtime_profile(spec: ModelSpec, runtime: ModelRuntimeSettings) -> RuntimeProfile:
    """``spec``'s runtime profile with this worker's ``profile_overrides`` for it, checked for its family.

    Raises ``ModelLoadError`` naming the model and the reason (an unknown field, a backend the family
    cannot use), so the worker refuses the model at load instead of failing inside a job.
    """
    override = runtime.profile_overrides.get(spec.id)
    try:
        profile = (
            spec.runtime
            if not override
            else RuntimeProfile.model_validate({**spec.runtime.model_dump(exclude_defaults=True), **override})
        )
        check_profile(spec.family, profile, spec.diffusers)
    except (ValidationError, ValueError) as e:
        raise ModelLoadError(f"{spec.id}: runtime profile refused: {e}") from e
    return profile


def use_attention_backend(models: list[Any], backend: str) -> None:
    """Run ``models``' attention on ``backend``, and only theirs.

    diffusers' ``set_attention_backend`` also makes its backend the process's active one, which every model
    without a backend of its own then runs on: another model this worker hosts, or one made context parallel,
    which refuses a backend without context parallel (``_native_math``). diffusers' ``attention_backend``
    context restores the active backend on exit."""
    from diffusers import attention_backend

    with attention_backend(backend):
        for model in models:
            model.set_attention_backend(backend)


def apply_profile(pipe: Any, profile: RuntimeProfile, device: str, *, denoisers: list[str]) -> None:
    """Place ``pipe`` on ``device`` with its runtime profile (attention backend, FP8, compile, tiling, offload).

    ``denoisers`` names the repeated-block transformers (``transformer``, ``transformer_2``): they get the
    attention backend and regional compilation. Offloading needs an accelerator; on CPU it is skipped.
    """
    quiet_progress_bars()
    pipe.set_progress_bar_config(disable=True)
    models = [m for name in denoisers if (m := getattr(pipe, name, None)) is not None]
    if profile.attention_backend:
        use_attention_backend(models, profile.attention_backend)
    if profile.fp8 != "none":  # before compile: the compiled blocks then include the casts
        apply_fp8(models, profile.fp8, device)
    if profile.compile:
        # Regional compilation: one compiled block reused N times; far shorter cold start than whole-model.
        compile_blocks(models)
    if profile.vae_tiling:
        pipe.vae.enable_tiling()
    offload = profile.offload
    if offload != "none" and not device.startswith("cuda"):
        log.info("offload=%s needs a CUDA device; running on %s without offload", offload, device)
        offload = "none"
    if offload == "model":
        # One swap per component per job: a few seconds over PCIe, small against minutes of denoising.
        pipe.enable_model_cpu_offload(device=device)
    elif offload == "group":
        import torch

        # Leaf-level groups with a CUDA stream overlap weight copies with compute; the VAEs stay resident.
        small = [n for n in ("vae", "audio_vae", "vocoder") if getattr(pipe, n, None) is not None]
        pipe.enable_group_offload(
            onload_device=torch.device(device), offload_type="leaf_level", use_stream=True, exclude_modules=small
        )
    else:
        pipe.to(device)


def apply_cache(models: list[Any], cache: CacheSpec | None) -> None:
    """Put the job's cache recipe on the denoisers (diffusers' hooks), or take it off: one loaded model serves
    every variant, so the hooks follow the job. The cache's state is reset for each job either way."""
    wanted = cache.model_dump_json() if cache is not None else None
    for model in models:
        current = _CACHE_RECIPES.get(model)
        if current != wanted:
            if model.is_cache_enabled:
                model.disable_cache()
            if cache is not None:
                model.enable_cache(_cache_config(cache))
            _CACHE_RECIPES[model] = wanted
        if cache is not None:
            model._reset_stateful_cache()


def _cache_config(cache: CacheSpec) -> Any:
    from diffusers.hooks import FirstBlockCacheConfig, TaylorSeerCacheConfig

    if cache.kind == "taylorseer":
        # Lite mode: whole blocks are skipped on predicted steps and the output projection is predicted. Its block
        # pattern matches every family here (``blocks.N``, ``transformer_blocks.N``); the default attention
        # patterns match only modules named ``...attn`` exactly, not Wan's or LTX-2's ``attn1``/``attn2``.
        return TaylorSeerCacheConfig(
            cache_interval=cache.interval, disable_cache_before_step=cache.warmup_steps, use_lite_mode=True
        )
    return FirstBlockCacheConfig(threshold=cache.threshold)


# float8 matmuls need the FP8 tensor cores of compute capability 8.9 (Ada) or 9.0 (Hopper) and newer.
FP8_COMPUTE_CAPABILITY = (8, 9)


def apply_fp8(models: list[Any], mode: str, device: str) -> None:
    """FP8 for the denoisers: ``storage`` (layerwise casting: float8_e4m3fn weights, each layer cast up to its
    compute dtype as it runs; norms and embeddings stay as they are) or ``compute`` (torchao's dynamic float8
    matmuls). ``compute`` is refused with ``ModelLoadError`` where it cannot run, so the worker does not host
    the model there instead of failing its jobs."""
    import torch

    if mode == "storage":
        for model in models:
            model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=model.dtype)
        return
    if not device.startswith("cuda") or torch.cuda.get_device_capability(torch.device(device)) < FP8_COMPUTE_CAPABILITY:
        raise ModelLoadError(
            f"fp8 compute needs a CUDA device of compute capability 8.9 or newer (Ada, Hopper); this one is {device}"
            "; use fp8: storage (layerwise casting) here"
        )
    try:
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quantize_
    except ImportError as e:
        raise ModelLoadError("fp8 compute needs torchao installed on the worker (pip install torchao)") from e
    for model in models:
        quantize_(model, Float8DynamicActivationFloat8WeightConfig())

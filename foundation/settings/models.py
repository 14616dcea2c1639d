"""Model runtime settings (the ``models`` section of ``Settings``; env ``GENWORKER_MODELS__*``).

How each model runs on a GPU (component dtypes, attention backend, offload, VAE tiling, compile) is its
runtime profile in the catalog (``ModelSpec.runtime``), not a worker setting: one worker may host models that
need different settings. A worker replaces profile fields per model with ``profile_overrides`` (say, no
offload on a 141 GB card); the result is checked like the catalog's own profile when the model loads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr

__all__ = ["ModelRuntimeSettings"]


class ModelRuntimeSettings(BaseModel):
    device: str = Field(default="auto", description='"auto" = cuda when available, else cpu')
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="auto = the catalog's dtype (float32 on CPU); a profile's per-component dtypes still apply.",
    )
    tiny_models_dir: str = Field(default="models", description="the tiny-* models (a relative dir: under data_dir)")
    weights_dir: str | None = Field(
        default=None, description="optional local root for real weights (hub ids map under it)"
    )
    weights_pin: Literal["refuse", "warn"] = Field(
        default="refuse",
        description=(
            "A local weights folder whose manifest (`genworker weights pull`) names another commit than the "
            "catalog's pin, or lacks files, is refused at load; warn: logged, and loaded anyway."
        ),
    )
    cache_budget_gb: float = Field(default=0.0, ge=0, description="0 = no budget beyond one model at a time")
    gpus_per_job: int = Field(
        default=1,
        ge=1,
        description=(
            "GPUs that run each job together (diffusers context parallel, Ulysses attention): > 1 needs the worker "
            "started by `torchrun --nproc-per-node N genworker worker`, N equal to this (docs/gpu.md)."
        ),
    )
    compile_cache_dir: str = Field(
        default="compile-cache",
        description=(
            "Where compiled models keep torch's compile caches between starts (a relative dir: under data_dir): "
            "inductor's cache directory and each model's cache artifacts, keyed by model, runtime profile and "
            "versions, so a restart or a second worker on the same volume starts without compiling "
            "(pipelines/runtime/compile_cache.py). Empty: off. TORCHINDUCTOR_CACHE_DIR, where set, wins."
        ),
    )
    compile_cache_key: SecretStr | None = Field(
        default=None,
        description=(
            "The worker-only key that seals each compiled model's cache artifacts (an HMAC: a blob another key made, "
            "or an altered one, is not loaded and the model compiles afresh). Unset: `<data_dir>/compile-cache.key`, "
            "made on first use. Workers that share artifacts through the store or a volume need the same key; "
            "never give it to the API."
        ),
    )
    compile_cache_in_store: bool = Field(
        default=False,
        description=(
            "Also keep each compiled model's cache artifacts in the artifact store (`compile-cache/...`), so a "
            "worker on another machine (a fresh node of the fleet) loads them before its warm-up."
        ),
    )
    profile_overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description=(
            "Per model id, runtime-profile fields that replace the catalog's on this worker, e.g. "
            '`{"ltx-2": {"offload": "none"}}` on a 141 GB card (docs/gpu.md); checked when the model loads.'
        ),
    )

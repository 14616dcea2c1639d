"""Model runtime settings (the ``models`` section of ``Settings``; env ``GENWORKER_MODELS__*``).

GPU knobs are wired even though CPU tests only exercise their defaults.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["ModelRuntimeSettings"]


class ModelRuntimeSettings(BaseModel):
    device: str = "auto"  # "auto" = cuda when available, else cpu
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto = the catalog's dtype
    tiny_models_dir: str = "var/models"  # where scripts/make_tiny_models.py writes tiny-* models
    weights_dir: str | None = None  # optional local root for real weights (hub ids map under it)
    cache_budget_gb: float = Field(default=0.0, ge=0)  # 0 = no budget beyond one model at a time
    attention_backend: str | None = None  # e.g. "flash", "_flash_3_hub", "sage"
    compile_blocks: bool = False  # torch.compile of repeated transformer blocks
    vae_tiling: bool = False
    cpu_offload: Literal["none", "model", "group"] = "none"

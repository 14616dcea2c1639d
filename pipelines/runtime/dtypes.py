"""Component dtypes: the names a catalog and a runtime profile use, as torch dtypes and as ``from_pretrained``'s
``dtype=`` mapping (the pipeline's dtype, except the components the profile names)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from foundation.core.catalog import RuntimeProfile

__all__ = ["load_dtypes", "torch_dtype"]


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_dtypes(profile: RuntimeProfile, dtype: str) -> dict[str, Any]:
    """The ``dtype=`` mapping for ``from_pretrained``: the pipeline's dtype, except the profile's components."""
    return {"default": torch_dtype(dtype), **{name: torch_dtype(d) for name, d in profile.dtypes.items()}}

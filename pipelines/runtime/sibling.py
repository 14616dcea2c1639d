"""A second diffusers pipeline over a loaded one's modules, each left exactly as it was loaded.

A family that serves two modes from one checkpoint (Wan 2.2 TI2V 5B's ``text_to_video``, LTX-2's
``image_to_video``) runs a second pipeline class over the same modules: no second copy of the weights.
diffusers' ``DiffusionPipeline.from_pipe`` would build it, but it ends with ``.to(dtype=...)`` and its dtype
defaults to float32, so a bare ``from_pipe`` casts every shared module in place: the bf16 transformer and text
encoder of the loaded model become float32 for every later job of either mode (twice the memory, float32
matmuls, and LTX-2's prompt mask then mismatches its query dtype). A single ``dtype=`` cannot keep a layout whose
components differ (the Wan VAE stays float32 beside a bf16 transformer), so the sibling is built from the
modules themselves, the documented ``Pipeline(**pipe.components)`` idiom narrowed to what the class takes.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["pipeline_over"]


def pipeline_over(cls: type[Any], pipe: Any) -> Any:
    """A ``cls`` pipeline sharing ``pipe``'s modules (dtype, device and hooks untouched) and its configuration
    values that ``cls`` also takes (``boundary_ratio``, ``expand_timesteps``); absent optional modules keep
    ``cls``'s defaults. Its progress bar is off, like every pipeline the adapters run."""
    components = pipe.components
    arguments: dict[str, Any] = {}
    for name in list(inspect.signature(cls.__init__).parameters)[1:]:
        if name in components:
            arguments[name] = components[name]
        elif name in pipe.config:
            arguments[name] = pipe.config[name]
    sibling = cls(**arguments)
    sibling.set_progress_bar_config(disable=True)
    return sibling

"""What a loaded model holds and gives back: its bytes (the model cache sizes models by them), freeing the
device's cached blocks after an unload, and waiting for the device so a stage's measured time is its own."""

from __future__ import annotations

import gc
from typing import Any

__all__ = ["free_device_memory", "module_bytes", "synchronize"]


def module_bytes(*objects: Any) -> int:
    """Bytes of parameters and buffers of every ``torch.nn.Module`` among ``objects`` and their attributes."""
    import torch

    seen: set[int] = set()
    total = 0
    for obj in objects:
        candidates = [obj] if isinstance(obj, torch.nn.Module) else list(getattr(obj, "components", {}).values())
        for module in candidates:
            if not isinstance(module, torch.nn.Module):
                continue
            for tensor in [*module.parameters(), *module.buffers()]:
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    total += tensor.numel() * tensor.element_size()
    return total


def free_device_memory(device: str) -> None:
    """Return freed memory to the allocator's owner: Python objects first, then CUDA's cached blocks."""
    gc.collect()
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def synchronize(device: str) -> None:
    """Wait for the device's queued kernels, so a stage's measured time is its own and not the next one's."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)

"""FLOPs of denoising, counted on the real model code (the fraction of a GPU's peak: ``pipelines.planning.mfu``).

No formula to keep in step with each architecture: while a job denoises, ``DenoiseFlops`` records each
denoiser call's input shapes (a forward pre-hook; nothing is copied); afterwards it rebuilds each denoiser
from its own config on the **meta device** and runs one forward per distinct call shape under torch's
``FlopCounterMode``, which counts every matmul, convolution and attention by its shapes without computing
anything. Wan 2.1 14B at 720p x 81 frames counts in ~1.6 s of CPU, once per model and shape (cached).

What is counted is the full model's forward: a cache variant's skipped blocks count as done (its MFU reads
as effective throughput), and LoRA adapters are not counted (a few per mille). Every diffusers adapter records
its denoise this way (``pipelines.runtime.diffusers_adapter``) and returns the record in its latents' ``stats``.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["DenoiseFlops", "forward_flops"]


class DenoiseFlops:
    """The FLOPs of one job's denoising: its denoisers' calls recorded during the run, counted after it."""

    def __init__(self) -> None:
        self._calls: Counter[tuple[str, str]] = Counter()  # (denoiser name, call signature) -> calls
        self._skeletons: dict[tuple[str, str], tuple[Any, tuple[Any, ...], dict[str, Any]]] = {}

    @contextmanager
    def recording(self, pipe: Any, denoisers: tuple[str, ...] = ("transformer", "transformer_2")) -> Iterator[None]:
        """Record every call of ``pipe``'s denoisers inside the block that really computed.

        A pre-hook on the denoiser notes the call's input shapes; a hook on its output projection (``proj_out``)
        counts it, so a call a resume replays without computing (``pipelines.runtime.resume``) is not counted. A
        denoiser without ``proj_out`` is counted at the call."""
        handles = []
        for name in denoisers:
            module = getattr(pipe, name, None)
            if module is not None:
                handles += _CallRecorder(self, name, module).install()
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    @property
    def calls(self) -> int:
        return sum(self._calls.values())

    def snapshot(self) -> Counter[tuple[str, str]]:
        """The calls recorded so far, by denoiser and shape: ``total(later - earlier)`` is what ran in between
        (cheap: nothing is counted until ``total``)."""
        return Counter(self._calls)

    def total(self, calls: Counter[tuple[str, str]] | None = None) -> float:
        """FLOPs of every recorded call, or of ``calls`` (a difference of snapshots); each distinct shape is
        counted once on a meta copy, then multiplied."""
        total = 0.0
        for key, count in (self._calls if calls is None else calls).items():
            module, args, kwargs = self._skeletons[key]
            total += count * forward_flops(module, args, kwargs)
        return total


class _CallRecorder:
    """One denoiser's hooks: ``note`` the input shapes at the call, count at ``proj_out`` (it computed)."""

    def __init__(self, owner: DenoiseFlops, name: str, module: Any) -> None:
        self.owner = owner
        self.name = name
        self.module = module
        self.at_output = isinstance(getattr(module, "proj_out", None), _nn_module())
        self.pending: tuple[str, str] | None = None

    def install(self) -> list[Any]:
        handles = [self.module.register_forward_pre_hook(self.note, with_kwargs=True)]
        if self.at_output:
            handles.append(self.module.proj_out.register_forward_hook(self.computed))
        return handles

    def note(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        meta_args, meta_kwargs = _to_meta(args), _to_meta(kwargs)
        key = (self.name, _signature(meta_args, meta_kwargs))
        self.owner._skeletons.setdefault(key, (module, meta_args, meta_kwargs))
        if self.at_output:
            self.pending = key
        else:
            self.owner._calls[key] += 1

    def computed(self, *_: Any) -> None:
        if self.pending is not None:
            self.owner._calls[self.pending] += 1


def forward_flops(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """FLOPs of one forward of ``module``'s architecture on inputs shaped like ``args``/``kwargs`` (meta)."""
    return _cached_flops(type(module), json.dumps(dict(module.config), sort_keys=True, default=str), args, kwargs)


def _cached_flops(cls: Any, config: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    key = (cls, config, _signature(args, kwargs))
    if key not in _FLOPS_CACHE:
        _FLOPS_CACHE[key] = _count(cls, json.loads(config), args, kwargs)
    return _FLOPS_CACHE[key]


_FLOPS_CACHE: dict[tuple[Any, str, str], float] = {}


def _count(cls: Any, config: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = _meta_model(cls, json.dumps(config, sort_keys=True))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*args, **kwargs)
    return float(counter.get_total_flops())


@functools.lru_cache(maxsize=8)
def _meta_model(cls: Any, config: str) -> Any:
    """``cls`` built from ``config`` with meta parameters (no memory), float32 like the meta inputs."""
    import torch

    with torch.device("meta"):
        model = cls.from_config(json.loads(config))
    return model.eval()


def _nn_module() -> type:
    import torch

    return torch.nn.Module


def _to_meta(value: Any) -> Any:
    """Tensors as float32 (floating) or same-dtype (integer) meta tensors of the same shape; containers recursed."""
    import torch

    if isinstance(value, torch.Tensor):
        dtype = torch.float32 if value.is_floating_point() else value.dtype
        return torch.empty(value.shape, dtype=dtype, device="meta")
    if isinstance(value, tuple | list):
        return type(value)(_to_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_meta(v) for k, v in value.items()}
    return value


def _signature(args: Any, kwargs: Any) -> str:
    def describe(value: Any) -> Any:
        import torch

        if isinstance(value, torch.Tensor):
            return f"T{tuple(value.shape)}:{value.dtype}"
        if isinstance(value, tuple | list):
            return [describe(v) for v in value]
        if isinstance(value, dict):
            return {k: describe(v) for k, v in sorted(value.items())}
        return repr(value)

    return json.dumps([describe(args), describe(kwargs)], sort_keys=True)

"""What every op of a simulated job made (``pipelines.simulation.simulate``): live bytes per phase, the largest
tensor, and each denoiser forward's FLOPs.

``OpRecorder`` is a ``TorchDispatchMode``: it sees every aten op with its outputs, real or fake. Each new
storage an op makes is counted live until it is freed (a weak-reference finaliser), views and in-place results
sharing a storage count once; the running sum's maximum per phase is the phase's activation peak above the
weights (the weights were made before the recording). The phase is the one the caller names, except while a
text encoder runs (``encode``), which its forward hooks mark.

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` over one forward of each denoiser per input shape
(the next forwards of that shape are counted as calls). It has no formula for CPU flash attention
(``aten._scaled_dot_product_flash_attention_for_cpu``), which SDPA runs on CPU tensors, so it would count CPU
attention as 0: ``CPU_FLASH`` registers the standard one (two matmuls: 4 x batch x heads x L_q x L_k x d).
"""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# torch's documented base for dispatch modes (the one FlopCounterMode is built on); it has no public alias.
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC2701

from pipelines.planning.fake_runtime import fake_mode, integer_indices, is_fake

__all__ = ["LARGE_REAL", "ForwardFlops", "OpRecorder", "cpu_flash_flops", "flop_kind"]

# An op of real inputs whose result has this many elements runs fake (``_run``): 256 MB in bf16. Below it, real
# work is cheaper than fake dispatch (HunyuanVideo 1.5's VAE fills a causal mask of 63 M elements row by row).
LARGE_REAL = 2**27


@dataclass(frozen=True)
class ForwardFlops:
    """One denoiser forward: which denoiser, its latent input's shape, FLOPs by kind."""

    denoiser: str
    shape: tuple[int, ...]
    attention: float
    linear: float
    conv: float
    other: float

    @property
    def total(self) -> float:
        return self.attention + self.linear + self.conv + self.other


def cpu_flash_flops(
    query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any
) -> int:
    """FLOPs of attention on (B, H, L, d) query/key/value: Q K^T and the weights times V, 2 FLOPs a MAC."""
    batch, heads, length_q, dim = query_shape
    length_k, dim_v = key_shape[2], value_shape[3]
    return int(2 * batch * heads * length_q * length_k * (dim + dim_v))


def flop_kind(op: Any) -> str:
    """attention / linear / conv / other for a counted op (its packet's name): bmm runs only in attention here
    (linear layers run mm/addmm; a math attention backend decomposes into bmm)."""
    name = str(op)
    if "scaled_dot_product" in name or "bmm" in name:
        return "attention"
    if "conv" in name:
        return "conv"
    if name.rsplit(".", 1)[-1] in ("mm", "addmm", "matmul", "linear"):
        return "linear"
    return "other"


class OpRecorder(TorchDispatchMode):
    """Live storage bytes per phase, the largest tensor, and denoiser FLOPs (``recording`` + ``phases``)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.phase = ""
        self.peaks: Counter[str] = Counter()  # phase -> the most live bytes seen in it
        self.largest: tuple[int, tuple[int, ...], str] = (0, (), "")
        self.forwards: list[ForwardFlops] = []
        self.calls: Counter[tuple[str, tuple[int, ...]]] = Counter()  # (denoiser, input shape) -> forwards run
        self._live: dict[int, int] = {}  # id(storage) -> bytes
        self._now = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        import torch

        kwargs = kwargs or {}
        indexing = func._overloadpacket in (torch.ops.aten.index, torch.ops.aten.index_put_, torch.ops.aten.index_put)
        if indexing and is_fake(args[0]) and (indices := integer_indices(list(args[1]))) is not None:
            args = (args[0], indices, *args[2:])
        out = _run(func, args, kwargs)
        inputs = None  # storages of the inputs: a view or an in-place result makes no new memory
        for tensor in out if isinstance(out, tuple | list) else (out,):
            if isinstance(tensor, torch.Tensor):
                if inputs is None:
                    inputs = _storages(args, kwargs)
                self._note(tensor, func, inputs)
        return out

    def _note(self, tensor: Any, func: Any, inputs: set[int]) -> None:
        numel = tensor.numel()
        if numel > self.largest[0]:
            self.largest = (numel, tuple(tensor.shape), str(func))
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self._live or key in inputs:
            return
        size = storage.nbytes()
        self._live[key] = size
        self._now += size
        weakref.finalize(storage, self._free, key)
        phase = self.phase
        self.peaks[phase] = max(self.peaks[phase], self._now)

    def _free(self, key: int) -> None:
        self._now -= self._live.pop(key, 0)

    @contextlib.contextmanager
    def recording(self) -> Iterator[OpRecorder]:
        with self:
            yield self

    @contextlib.contextmanager
    def phases(self, pipe: Any, *, encoders: list[str], denoisers: list[str]) -> Iterator[None]:
        """Hooks: the text encoders' forwards are the ``encode`` phase; each denoiser's first forward per input
        shape is FLOP-counted, every forward is counted as a call."""
        handles = []
        for name in encoders:
            module = getattr(pipe, name, None)
            if module is not None:
                handles += _EncodePhase(self).install(module)
        for name in denoisers:
            module = getattr(pipe, name, None)
            if module is not None:
                handles += _ForwardFlops(self, name).install(module)
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def _run(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func`` as it would run, except an op of real inputs whose result would be large: run fake instead
    (RoPE tables and masks built from real positions at full size are gigabytes of real CPU work otherwise). Its
    size is learnt from a fake run first; an op the fake mode cannot run (a value read back, ``.item()``) and an
    in-place one or a view (no new memory) run real."""
    if func.is_view or func._schema.is_mutable or any(is_fake(a) for a in _tensors(args, kwargs)):
        return func(*args, **kwargs)
    try:
        with fake_mode():
            shaped = func(*args, **kwargs)
    except Exception:  # kept broad: whatever the fake run refuses runs for real
        return func(*args, **kwargs)
    if max((t.numel() for t in _tensors(shaped)), default=0) >= LARGE_REAL:
        return shaped
    return func(*args, **kwargs)


def _tensors(*values: Any) -> list[Any]:
    import torch

    found = []
    for value in values:
        items = value.values() if isinstance(value, dict) else value if isinstance(value, tuple | list) else (value,)
        for item in items:
            if isinstance(item, tuple | list):
                found += _tensors(item)
            elif isinstance(item, torch.Tensor):
                found.append(item)
    return found


def _storages(args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[int]:
    import torch

    found: set[int] = set()
    for value in [*args, *kwargs.values()]:
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, torch.Tensor):
                found.add(id(item.untyped_storage()))
    return found


class _EncodePhase:
    def __init__(self, recorder: OpRecorder) -> None:
        self.recorder = recorder
        self.outer: list[str] = []

    def install(self, module: Any) -> list[Any]:
        return [module.register_forward_pre_hook(self.enter), module.register_forward_hook(self.leave)]

    def enter(self, *_: Any) -> None:
        self.outer.append(self.recorder.phase)
        self.recorder.phase = "encode"

    def leave(self, *_: Any) -> None:
        self.recorder.phase = self.outer.pop()


class _ForwardFlops:
    def __init__(self, recorder: OpRecorder, name: str) -> None:
        self.recorder = recorder
        self.name = name
        self.seen: set[tuple[int, ...]] = set()
        self.counter: Any = None
        self.shape: tuple[int, ...] = ()

    def install(self, module: Any) -> list[Any]:
        return [
            module.register_forward_pre_hook(self.enter, with_kwargs=True),
            module.register_forward_hook(self.leave),
        ]

    def enter(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        hidden = kwargs.get("hidden_states", args[0] if args else None)
        shape = tuple(hidden.shape) if hidden is not None else ()
        self.recorder.calls[(self.name, shape)] += 1
        if shape in self.seen:
            return
        self.seen.add(shape)
        self.shape = shape
        cpu_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        self.counter = FlopCounterMode(display=False, custom_mapping={cpu_flash: cpu_flash_flops})
        self.counter.__enter__()

    def leave(self, *_: Any) -> None:
        if self.counter is None:
            return
        counter, self.counter = self.counter, None
        counter.__exit__(None, None, None)
        kinds: Counter[str] = Counter()
        for op, flops in counter.get_flop_counts().get("Global", {}).items():
            kinds[flop_kind(op)] += flops
        self.recorder.forwards.append(
            ForwardFlops(self.name, self.shape, kinds["attention"], kinds["linear"], kinds["conv"], kinds["other"])
        )

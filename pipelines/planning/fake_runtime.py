"""What a pipeline needs to run over fake parameters on a CPU (``pipelines.simulation.simulate``).

``torch._subclasses.fake_tensor.FakeTensorMode`` is torch's documented fake-tensor mechanism (the one
``torch.compile`` and ``torch.export`` trace with); it has no public alias, hence the private module path. A fake
tensor carries shape, dtype and device and no storage; every op on one computes only its result's metadata.

Four seams where the production code meets fake tensors, each kept to the simulation:
- ``fake_safe_moves``: ``nn.Module._apply`` (behind ``.to``, ``.half``...) swaps a fake parameter in place with
  ``torch.utils.swap_tensors``, which refuses tensors the fake mode holds weak references to; under this context
  a move that changes nothing is skipped and a real move or cast rebinds the parameter (ties kept);
- ``HostBoundary``: frames and waveforms leave for the host with ``Tensor.numpy``, which needs real values: a
  fake tensor's shape is recorded there and zeros of its shape and dtype go on;
- ``integer_indices``: a real boolean mask indexing a fake tensor needs the mask's values to size its result;
  the mask's true positions (real, computed here) index instead, which is the same selection;
- ``real_outputs``: a branch on an encoder's output values (HunyuanVideo 1.5's transformer tells a text job from an
  image job by ``torch.all(image_embeds == 0)``) cannot read a fake tensor; the encoder's fake outputs are
  replaced by real random values of their shape and dtype, which is what an image gives (nonzero embeddings).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from torch.overrides import TorchFunctionMode

if TYPE_CHECKING:
    import torch

__all__ = ["HostBoundary", "fake_mode", "fake_safe_moves", "integer_indices", "is_fake", "real_outputs"]


@functools.cache
def _shared_mode() -> Any:
    # One mode for the process: fake tensors of two modes cannot meet in one op. Real inputs are allowed (they
    # become fake constants of it), so small real tensors can feed the fake model.
    from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: PLC2701 - no public alias (module docstring)

    return FakeTensorMode(allow_non_fake_inputs=True)


@contextlib.contextmanager
def fake_mode() -> Iterator[None]:
    """Every tensor made inside is fake (parameters, LoRA layers): the shared fake mode."""
    with _shared_mode():
        yield


def is_fake(value: Any) -> bool:
    return isinstance(value, _fake_class())


@functools.cache
def _fake_class() -> type:
    from torch._subclasses.fake_tensor import FakeTensor  # noqa: PLC2701 - no public alias (module docstring)

    return FakeTensor


@contextlib.contextmanager
def fake_safe_moves() -> Iterator[None]:
    """``nn.Module._apply`` that moves or casts a module holding fake parameters by rebinding them."""
    import torch

    original = torch.nn.Module._apply

    def _apply(self: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
        modules = list(self.modules()) if recurse else [self]
        if not any(is_fake(t) for m in modules for t in m._parameters.values()):
            return original(self, fn, recurse)  # type: ignore[no-untyped-call]
        done: dict[int, Any] = {}  # tied tensors stay tied
        for module in modules:
            for store in (module._parameters, module._buffers):
                for key, tensor in list(store.items()):
                    if tensor is not None:
                        store[key] = done.setdefault(id(tensor), _applied(tensor, fn))
        return self

    torch.nn.Module._apply = _apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module._apply = original  # type: ignore[method-assign]


def _applied(tensor: Any, fn: Callable[[Any], Any]) -> Any:
    import torch

    with torch.no_grad():
        out = fn(tensor)
    if out is tensor:
        return tensor
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(out, requires_grad=tensor.requires_grad)
    return out


class HostBoundary(TorchFunctionMode):
    """``Tensor.numpy`` of a fake tensor: its shape recorded in ``shapes``, zeros of its shape returned."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        import torch

        if func is torch.Tensor.numpy and args and is_fake(args[0]):
            import numpy as np

            tensor = args[0]
            self.shapes.append(tuple(tensor.shape))
            real = torch.float32 if tensor.dtype == torch.bfloat16 else tensor.dtype  # numpy has no bfloat16
            return np.zeros(tuple(tensor.shape), dtype=torch.empty((), dtype=real).numpy().dtype)
        return func(*args, **(kwargs or {}))


def integer_indices(indices: list[Any]) -> list[Any] | None:
    """``aten.index`` indices with each real boolean mask replaced by the integer positions it selects, or None
    when there is none to replace."""
    import torch

    out: list[Any] = []
    replaced = False
    for index in indices:
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool and not is_fake(index):
            out += list(index.nonzero().unbind(1))
            replaced = True
        else:
            out.append(index)
    return out if replaced else None


@contextlib.contextmanager
def real_outputs(module: torch.nn.Module | None) -> Iterator[None]:
    """While inside, each fake tensor ``module`` returns (alone, in a tuple or in a ``ModelOutput``) is replaced by
    real values of its shape and dtype (standard normal; ones for integers); nothing happens for ``None``."""
    if module is None:
        yield
        return

    def hook(_module: Any, _args: Any, output: Any) -> Any:
        return _realized(output)

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _realized(value: Any) -> Any:
    import torch

    if is_fake(value):
        make = torch.randn if value.dtype.is_floating_point else torch.ones
        return make(tuple(value.shape), dtype=value.dtype, device=value.device)
    if type(value) is tuple:  # a plain tuple (hidden states per layer); named tuples are left as they are
        return tuple(_realized(v) for v in value)
    if isinstance(value, dict):  # transformers' ModelOutput is an ordered dict whose keys are its attributes too
        for key, item in list(value.items()):
            value[key] = _realized(item)
    return value

"""Attention backends and FP8 on one denoiser call, for ``bench_gpu.py --random-weights``: each variant's
forward time and its largest difference from the SDPA reference, on the same inputs (a call captured from
the job the bench just ran through the production adapter). The bench compares them on one job (Wan 2.1 14B
480p): the same kernels on every model would spend the minutes the later models need.

Variants:
- ``SDPA`` (the reference): the profile's backend, torch's SDPA dispatch unless the profile names one;
- ``SDPA flash`` / ``SDPA cuDNN``: diffusers' ``_native_flash`` / ``_native_cudnn`` (``SDPA math`` on CPU, where
  the others do not run);
- ``flash-attn-4``: the ``flash-attn-4`` package's CuTe kernel (``flash_attn.cute.flash_attn_func``). diffusers
  0.42.1 reaches it only as a hub kernel (``flash_4_hub``), which an offline node cannot fetch, so here torch's
  SDPA entry point is swapped for it while the reference backend runs (masked calls stay on SDPA, and the
  counts say so);
- ``sageattention``: diffusers' ``sage`` backend where the installed ``sageattention`` is one it accepts
  (>= 2.1.1), else the same swap with ``sageattention.sageattn`` (the 1.x Triton kernels);
- ``fp8 storage``: ``pipelines.runtime.profile.apply_fp8(..., "storage")`` on the denoiser (layerwise casting);
- ``fp8 compute``: the same with ``"compute"`` (torchao float8 matmuls; refused below compute capability 8.9).

FP8 changes the weights in place, so it runs last: storage on the bench's denoiser, compute on a rebuild of it
from the same seed (the same weights), and the model is dropped afterwards.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Variant", "attention_variants", "clone_inputs", "compare", "forwards", "max_abs_diff", "timed_forward"]

Variant = tuple[str, Callable[[Any], contextlib.AbstractContextManager[Any]]]


def clone_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    import torch

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, tuple | list):
            return type(value)(copy(v) for v in value)
        if isinstance(value, dict):
            return {k: copy(v) for k, v in value.items()}
        return value

    return copy(args), copy(kwargs)


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    if hasattr(value, "to_tuple"):
        return _tensors(value.to_tuple())
    return []


def max_abs_diff(out: Any, ref: Any) -> float:
    """The largest absolute difference over every tensor of two outputs (float32; NaN propagates)."""
    pairs = list(zip(_tensors(out), _tensors(ref), strict=True))
    return max(float((a.float() - b.float()).abs().max()) for a, b in pairs)


def timed_forward(module: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]], device: str) -> tuple[Any, float]:
    """One warm-up forward (kernel selection, JIT), then timed forwards: one when a forward takes over 2 s or
    off CUDA (a dry run checks the path, not the speed), else three (the median). Returns the last output and
    the seconds per forward."""
    import statistics

    import torch

    args, kwargs = inputs

    def once() -> tuple[Any, float]:
        _sync(device)
        started = time.perf_counter()
        with torch.no_grad():
            out = module(*args, **kwargs)
        _sync(device)
        return out, time.perf_counter() - started

    out, first = once()
    times = []
    for _ in range(1 if first > 2.0 or not device.startswith("cuda") else 3):
        out, seconds = once()
        times.append(seconds)
    return out, statistics.median(times)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------------------------- attention variants


@contextlib.contextmanager
def _backend(module: Any, name: str, reference: str) -> Iterator[dict[str, int]]:
    from pipelines.runtime.profile import use_attention_backend

    use_attention_backend([module], name)
    try:
        yield {}
    finally:
        use_attention_backend([module], reference)


@contextlib.contextmanager
def _sdpa_swapped(kernel: Callable[..., Any]) -> Iterator[dict[str, int]]:
    """torch's SDPA entry point replaced by ``kernel(q, k, v, is_causal=, scale=)`` (tensors (B, H, S, D)) for
    unmasked half-precision CUDA calls; other calls go to SDPA. Yields the counts of each."""
    import torch

    original = torch.nn.functional.scaled_dot_product_attention
    counts = {"routed": 0, "fallback": 0}

    def swapped(
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Any:
        half = query.dtype in (torch.bfloat16, torch.float16)
        if attn_mask is None and dropout_p == 0.0 and not enable_gqa and half and query.is_cuda:
            counts["routed"] += 1
            return kernel(query, key, value, is_causal=is_causal, scale=scale)
        counts["fallback"] += 1
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)

    torch.nn.functional.scaled_dot_product_attention = swapped
    try:
        yield counts
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


def _flash4(query: Any, key: Any, value: Any, *, is_causal: bool, scale: float | None) -> Any:
    from flash_attn.cute import flash_attn_func

    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # (B, S, H, D), the layout it takes
    out = flash_attn_func(q, k, v, softmax_scale=scale, causal=is_causal)
    return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)


def _sage(query: Any, key: Any, value: Any, *, is_causal: bool, scale: float | None) -> Any:
    from sageattention import sageattn

    return sageattn(query, key, value, tensor_layout="HND", is_causal=is_causal, sm_scale=scale)


def _swap_variant(module: Any, import_name: str, kernel: Callable[..., Any]) -> Any:
    import importlib

    importlib.import_module(import_name)  # not installed: the ImportError is the variant's result
    return _sdpa_swapped(kernel)


def _sage_variant(module: Any, reference: str) -> Any:
    from importlib.metadata import version

    from packaging.version import Version

    if Version(version("sageattention")) >= Version("2.1.1"):  # what diffusers' own backend accepts
        return _backend(module, "sage", reference)
    return _swap_variant(module, "sageattention", _sage)


def attention_variants(device: str, reference: str) -> list[Variant]:
    """The attention variants to compare on ``device`` (each a label and a context manager factory)."""
    sdpa = [("SDPA flash", "_native_flash"), ("SDPA cuDNN", "_native_cudnn")]
    if not device.startswith("cuda"):
        sdpa = [("SDPA math", "_native_math"), *sdpa]
    variants: list[Variant] = [
        (label, lambda m, name=name: _backend(m, name, reference))  # type: ignore[misc]
        for label, name in sdpa
    ]
    variants.append(("flash-attn-4", lambda m: _swap_variant(m, "flash_attn.cute", _flash4)))
    variants.append(("sageattention", lambda m: _sage_variant(m, reference)))
    return variants


# --------------------------------------------------------------------------------------------- the phase


def forwards(device: str) -> int:
    """The denoiser forwards ``compare`` runs on ``device`` when each takes over 2 s (a warm-up and one timed, for
    the reference, each attention variant and both FP8 modes): what its time is estimated from."""
    return 2 * (1 + len(attention_variants(device, "native")) + 2)


def _need_s(ctx: dict[str, Any], forward_s: float) -> float:
    """Time a variant must find left: about two forwards and a margin (nothing in the dry run)."""
    return 0.0 if ctx["dry_run"] else 2.5 * forward_s + 5.0


def compare(ctx: dict[str, Any], rm: Any, mj: Any, captured: Any, results: Any) -> None:
    """Every variant on the captured call of ``rm``'s first denoiser, each result written as it comes. The reference
    runs only when the time left covers about two forwards as the job's estimate has them; each variant only when
    it covers about two of the reference's measured forwards (FP8 compute: and a rebuild of the denoiser)."""
    from pipelines.runtime.profile import apply_fp8, use_attention_backend

    device, deadline = ctx["device"], ctx["deadline"]
    pipe, name = rm.adapter.pipe, rm.denoisers[0]
    module = getattr(pipe, name)
    reference = rm.profile.attention_backend or "native"
    need = _need_s(ctx, ctx["estimate"].forward_s)
    if not deadline.fits(need):
        skipped = f"deadline: {max(deadline.left(), 0):.0f} s left, needs ~{need:.0f}"
        results.add_backend(mj.model, {"variant": f"SDPA ({reference})", "skipped": skipped})
        return
    ref_out, ref_s = timed_forward(module, captured, device)
    ref_scale = max(float(t.float().abs().max()) for t in _tensors(ref_out))
    results.add_backend(
        mj.model, {"variant": f"SDPA ({reference})", "forward_s": round(ref_s, 4), "ref_max_abs": ref_scale}
    )

    def measure(label: str, run: Callable[[], tuple[Any, float, dict[str, int]]], extra_s: float = 0.0) -> None:
        need = _need_s(ctx, ref_s) + (0.0 if ctx["dry_run"] else extra_s)
        if not deadline.fits(need):
            results.add_backend(mj.model, {"variant": label, "skipped": f"deadline: {deadline.left():.0f} s left"})
            return
        try:
            out, seconds, counts = run()
            entry: dict[str, Any] = {"forward_s": round(seconds, 4), "vs_sdpa": round(ref_s / seconds, 3)}
            entry["max_abs_diff"] = max_abs_diff(out, ref_out)
            entry |= counts
        except Exception as e:  # a kernel that is missing, refuses the shapes or fails: that is its result
            entry = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        results.add_backend(mj.model, {"variant": label, **entry})

    for label, factory in attention_variants(device, reference):

        def attention(factory: Any = factory) -> tuple[Any, float, dict[str, int]]:
            with factory(module) as counts:
                out, seconds = timed_forward(module, captured, device)
            return out, seconds, dict(counts)

        measure(label, attention)

    # FP8 last: it changes the weights in place. Storage on this denoiser, compute on a rebuild (same weights).
    def storage() -> tuple[Any, float, dict[str, int]]:
        apply_fp8([module], "storage", device)
        return (*timed_forward(module, captured, device), {})

    measure("fp8 storage", storage)
    try:
        apply_fp8([], "compute", device)  # the device and torchao checks alone, before rebuilding 14 B
    except Exception as e:
        results.add_backend(mj.model, {"variant": "fp8 compute (torchao)", "error": f"refused: {e}"})
        return

    def compute() -> tuple[Any, float, dict[str, int]]:
        nonlocal module
        setattr(pipe, name, None)
        module = None
        _free(device)
        rebuilt = rm.rebuild(name)
        use_attention_backend([rebuilt], reference)
        apply_fp8([rebuilt], "compute", device)
        setattr(pipe, name, rebuilt)
        return (*timed_forward(rebuilt, captured, device), {})

    measure("fp8 compute (torchao)", compute, extra_s=ctx["estimate"].build_s)


def _free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

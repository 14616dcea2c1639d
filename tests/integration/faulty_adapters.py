"""Test-only adapters, registered through a test catalog (``catalog_faults.yaml``), never patched in.

Each wraps the real tiny Wan adapter (real diffusers pipeline, real weights on disk) and adds one
behaviour a worker must survive: a pipeline that raises, runs out of memory, is slow per step, or
hangs inside a step. The faults live in ``denoise``; ``decode`` is the real one. Knobs are class
attributes keyed by the job's variant, not ``pipeline_kwargs``: the catalog refuses options a family
does not take, and these entries are family ``wan``.

``SlowWan`` appends ``<prompt>\\t<step>\\t<unix time>`` to ``$GENWORKER_TEST_STEP_LOG`` after each
step the worker let pass (its ``on_step`` returned), so a test can count the steps that ran after a
cancel request.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, ClassVar

import numpy as np
import torch

from foundation.core.catalog import ModelSpec
from foundation.core.media import Media, StepCallback
from foundation.core.resolve import ResolvedJob
from foundation.settings.models import ModelRuntimeSettings
from pipelines.families.ltx2 import LTX2TextToVideo
from pipelines.families.wan import WanTextToVideo
from pipelines.families.wan_i2v import WanImageToVideo
from pipelines.runtime.adapter import Adapter, Latents

__all__ = ["HangingWan", "InstantWan", "OomOnceWan", "OomWan", "RaisingWan", "SlowLtx2", "SlowWan", "SlowWanI2V"]


class _WrappedWan(Adapter):
    """Delegates to the real tiny Wan adapter; subclasses change ``denoise``. Its ``prompt_tokens`` keeps the
    base's default: the worker counts no tokens of it (FLOPs come with the inner adapter's latents)."""

    options: ClassVar[frozenset[str]] = WanTextToVideo.options

    def __init__(self, spec: ModelSpec, inner: Any) -> None:
        self.spec = spec
        self.inner = inner
        self.device = inner.device
        self.profile = inner.profile

    inner_class: ClassVar[Any] = WanTextToVideo

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> _WrappedWan:
        return cls(spec, cls.inner_class.load(spec, runtime, device=device, dtype=dtype))

    def extend_prompt(self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int) -> str:
        return str(self.inner.extend_prompt(prompt, max_new_tokens=max_new_tokens, timeout_s=timeout_s, seed=seed))

    def memory_bytes(self) -> int:
        return int(self.inner.memory_bytes())

    def unload(self) -> None:
        self.inner.unload()

    def denoise(self, job: ResolvedJob, on_step: StepCallback, **kwargs: Any) -> Latents:
        return self.inner.denoise(job, on_step, **kwargs)  # type: ignore[no-any-return]

    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        return self.inner.decode(latents, job)  # type: ignore[no-any-return]


class RaisingWan(_WrappedWan):
    """Model code that raises at denoising step ``fail_at_step``."""

    fail_at_step = 2

    def denoise(self, job: ResolvedJob, on_step: StepCallback) -> Latents:
        def step(done: int, total: int) -> None:
            on_step(done, total)
            if done >= self.fail_at_step:
                raise ValueError("synthetic pipeline failure (test adapter)")

        return super().denoise(job, step)


class OomWan(_WrappedWan):
    """Every denoise runs out of memory, as CUDA reports it."""

    def denoise(self, job: ResolvedJob, on_step: StepCallback) -> Latents:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (test adapter)")


# Prompts that already ran out of memory once in this process (the worker retries in-process).
_oom_seen: set[str] = set()
_oom_lock = threading.Lock()


class OomOnceWan(_WrappedWan):
    """The first denoise of each prompt runs out of memory; the retry succeeds."""

    def denoise(self, job: ResolvedJob, on_step: StepCallback) -> Latents:
        with _oom_lock:
            first = job.prompt not in _oom_seen
            _oom_seen.add(job.prompt)
        if first:
            raise RuntimeError("CUDA error: out of memory (test adapter)")
        return super().denoise(job, on_step)


class SlowWan(_WrappedWan):
    """Sleeps per transformer forward, by variant: long enough to cancel, signal or kill mid-denoise.

    The sleep is in the transformer's real forward (a hook on its output projection), so the steps a resume
    replays without computing are as fast as on a GPU, and it is resumable like the Wan it wraps.
    """

    resumable = True
    # slow-wan ``long`` (40 steps, ~6 s) and ``short`` (10 steps, ~2 s); timeout-wan ``standard``.
    step_sleep_s: ClassVar[dict[str, float]] = {"long": 0.15, "short": 0.2, "standard": 0.1}

    def denoise(self, job: ResolvedJob, on_step: StepCallback, **kwargs: Any) -> Latents:
        pause_s = self.step_sleep_s[job.variant]
        log_path = os.environ.get("GENWORKER_TEST_STEP_LOG")

        def step(done: int, total: int) -> None:
            on_step(done, total)
            if log_path:
                with open(log_path, "a", encoding="utf-8") as f:
                    f.write(f"{job.prompt}\t{done}\t{time.time():.6f}\n")

        hook = self.inner.pipe.transformer.proj_out.register_forward_hook(lambda *_: time.sleep(pause_s))
        try:
            return super().denoise(job, step, **kwargs)
        finally:
            hook.remove()


class _SlowForwards(_WrappedWan):
    """Another real adapter (``inner_class``) with ``pause_s`` of sleep per real transformer forward (hooks on
    each expert's output projection: steps a resume replays stay fast). Resumable like the adapter it wraps."""

    resumable = True
    pause_s: ClassVar[float] = 0.1

    def denoise(self, job: ResolvedJob, on_step: StepCallback, **kwargs: Any) -> Latents:
        pipe = self.inner.pipe
        hooks = [
            module.proj_out.register_forward_hook(lambda *_: time.sleep(self.pause_s))
            for name in ("transformer", "transformer_2")
            if (module := getattr(pipe, name, None)) is not None
        ]
        try:
            return super().denoise(job, on_step, **kwargs)
        finally:
            for hook in hooks:
                hook.remove()


class SlowLtx2(_SlowForwards):
    """Tiny LTX-2 (video and audio) with slow steps."""

    options: ClassVar[frozenset[str]] = LTX2TextToVideo.options
    inner_class: ClassVar[Any] = LTX2TextToVideo


class SlowWanI2V(_SlowForwards):
    """Tiny Wan image-to-video (Wan 2.2 A14B: two experts) with slow steps."""

    inner_class: ClassVar[Any] = WanImageToVideo


class HangingWan(_WrappedWan):
    """Never returns from the first step, like a wedged CUDA kernel (nothing in-process interrupts it)."""

    def denoise(self, job: ResolvedJob, on_step: StepCallback) -> Latents:
        def step(done: int, total: int) -> None:
            while True:
                time.sleep(1.0)

        return super().denoise(job, step)


class _Color(Latents):
    """What ``InstantWan.denoise`` leaves for ``decode``: one colour, from the seed."""

    def __init__(self, rgb: tuple[int, int, int]) -> None:
        self.rgb = rgb


class InstantWan(Adapter):
    """No model at all: every step reported at once, a clip of one colour per seed. The soak's model
    (``scripts/soak.py --faults``), which measures the queue, the worker and the stores, not denoising.

    With ``$GENWORKER_TEST_CALL_LOG`` set, ``denoise`` first appends ``<prompt>\t<unix time>`` to that
    file: when the worker handed the job to the adapter (the daemon's pick-up, ``scripts/bench_worker.py``)."""

    options: ClassVar[frozenset[str]] = WanTextToVideo.options

    def __init__(self, spec: ModelSpec, device: str) -> None:
        self.spec = spec
        self.device = device
        self.profile = spec.runtime

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> InstantWan:
        return cls(spec, device)

    def extend_prompt(self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int, **_: Any) -> str:
        return prompt

    def memory_bytes(self) -> int:
        return 0

    def unload(self) -> None:
        return None

    def denoise(self, job: ResolvedJob, on_step: StepCallback, **_: Any) -> Latents:
        called = time.time()
        if call_log := os.environ.get("GENWORKER_TEST_CALL_LOG"):
            with open(call_log, "a", encoding="utf-8") as f:
                f.write(f"{job.prompt}\t{called!r}\n")
        for step in range(1, job.steps + 1):
            on_step(step, job.steps)
        return _Color((job.seed * 37 % 256, job.seed * 91 % 256, job.seed * 13 % 256))

    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        assert isinstance(latents, _Color)
        frames = np.empty((job.num_frames, job.gen_height, job.gen_width, 3), dtype=np.uint8)
        frames[...] = latents.rgb
        return Media(job.gen_width, job.gen_height, float(job.fps), job.num_frames, iter([frames]))

"""Test-only adapters, registered through a test catalog (``catalog_faults.yaml``), never patched in.

Each wraps the real tiny Wan adapter (real diffusers pipeline, real weights on disk) and adds one
behaviour a worker must survive: a pipeline that raises, runs out of memory, is slow per step, or
hangs inside a step. Knobs come from the variant's ``pipeline_kwargs`` (removed before the real
pipeline sees them), so one class serves several catalog entries.

``SlowWan`` appends ``<prompt>\\t<step>\\t<unix time>`` to ``$GENWORKER_TEST_STEP_LOG`` after each
step the worker let pass (its ``on_step`` returned), so a test can count the steps that ran after a
cancel request.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import torch

from pipelines.config import ModelRuntimeSettings
from pipelines.wan import WanTextToVideo
from worker.core.catalog import ModelSpec
from worker.core.media import Media, StepCallback
from worker.core.resolve import ResolvedJob

__all__ = ["HangingWan", "OomOnceWan", "OomWan", "RaisingWan", "SlowWan"]


class _WrappedWan:
    """Delegates to the real tiny Wan adapter; subclasses change ``generate``."""

    def __init__(self, spec: ModelSpec, inner: Any) -> None:
        self.spec = spec
        self.inner = inner

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> _WrappedWan:
        return cls(spec, WanTextToVideo.load(spec, runtime, device=device, dtype=dtype))

    def extend_prompt(self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int) -> str:
        return str(self.inner.extend_prompt(prompt, max_new_tokens=max_new_tokens, timeout_s=timeout_s, seed=seed))

    def unload(self) -> None:
        self.inner.unload()

    def generate(self, job: ResolvedJob, on_step: StepCallback) -> Media:
        return self.inner.generate(_without_knobs(job), on_step)  # type: ignore[no-any-return]


def _knob(job: ResolvedJob, name: str, default: float) -> float:
    return float(job.pipeline_kwargs.get(name, default))


def _without_knobs(job: ResolvedJob) -> ResolvedJob:
    kwargs = {k: v for k, v in job.pipeline_kwargs.items() if not k.startswith("test_")}
    return job.model_copy(update={"pipeline_kwargs": kwargs})


class RaisingWan(_WrappedWan):
    """Model code that raises at step ``test_fail_at_step`` (default 1)."""

    def generate(self, job: ResolvedJob, on_step: StepCallback) -> Media:
        fail_at = int(_knob(job, "test_fail_at_step", 1))

        def step(done: int, total: int) -> None:
            on_step(done, total)
            if done >= fail_at:
                raise ValueError("synthetic pipeline failure (test adapter)")

        return super().generate(job, step)


class OomWan(_WrappedWan):
    """Every generate runs out of memory, as CUDA reports it."""

    def generate(self, job: ResolvedJob, on_step: StepCallback) -> Media:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (test adapter)")


# Prompts that already ran out of memory once in this process (the worker retries in-process).
_oom_seen: set[str] = set()
_oom_lock = threading.Lock()


class OomOnceWan(_WrappedWan):
    """The first generate of each prompt runs out of memory; the retry succeeds."""

    def generate(self, job: ResolvedJob, on_step: StepCallback) -> Media:
        with _oom_lock:
            first = job.prompt not in _oom_seen
            _oom_seen.add(job.prompt)
        if first:
            raise RuntimeError("CUDA error: out of memory (test adapter)")
        return super().generate(job, on_step)


class SlowWan(_WrappedWan):
    """Sleeps ``test_step_sleep_s`` per step (long enough to cancel, signal or kill mid-denoise)."""

    def generate(self, job: ResolvedJob, on_step: StepCallback) -> Media:
        pause_s = _knob(job, "test_step_sleep_s", 0.1)
        log_path = os.environ.get("GENWORKER_TEST_STEP_LOG")

        def step(done: int, total: int) -> None:
            time.sleep(pause_s)
            on_step(done, total)
            if log_path:
                with open(log_path, "a", encoding="utf-8") as f:
                    f.write(f"{job.prompt}\t{done}\t{time.time():.6f}\n")

        return super().generate(job, step)


class HangingWan(_WrappedWan):
    """Never returns from the first step, like a wedged CUDA kernel (nothing in-process interrupts it)."""

    def generate(self, job: ResolvedJob, on_step: StepCallback) -> Media:
        def step(done: int, total: int) -> None:
            while True:
                time.sleep(1.0)

        return super().generate(job, step)

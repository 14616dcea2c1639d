"""The adapter contract between the worker and a model family, and the media it produces.

An adapter is loaded once (``load``) and then generates many jobs (``generate``). It never touches Redis,
S3 or HTTP. Frames leave as uint8 chunks so a long video never sits on the host as float32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from pipelines.config import ModelRuntimeSettings
    from worker.catalog import ModelSpec
    from worker.resolve import ResolvedJob

__all__ = ["Adapter", "AudioTrack", "Media", "StepCallback"]

# on_step(step_index, total_steps): reports denoising progress; raises (e.g. JobCanceled) to stop.
StepCallback = Callable[[int, int], None]


@dataclass
class AudioTrack:
    """A waveform: float32 samples shaped (channels, n) in [-1, 1], at ``sample_rate`` Hz."""

    samples: np.ndarray
    sample_rate: int

    @property
    def channels(self) -> int:
        return int(self.samples.shape[0])


@dataclass
class Media:
    """One generated clip at generation size (``width`` x ``height``, a multiple of the stride).

    ``chunks`` yields uint8 arrays shaped (n, height, width, 3), in order, ``num_frames`` in total; it can
    be consumed once. The encoder keeps the first ``keep_frames`` and center-crops to the target size.
    """

    width: int
    height: int
    fps: float
    num_frames: int
    chunks: Iterator[np.ndarray]
    audio: AudioTrack | None = None


class Adapter(Protocol):
    """A loaded model family. ``load`` once, then ``generate`` per job (deterministic per seed)."""

    spec: ModelSpec

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> Adapter: ...

    def generate(self, job: ResolvedJob, on_step: StepCallback) -> Media: ...

    def extend_prompt(self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int) -> str:
        """Rewrite ``prompt`` with more detail (text encoder or chat LLM); raise on failure."""
        ...

    def unload(self) -> None:
        """Free the model's memory (host and device)."""
        ...

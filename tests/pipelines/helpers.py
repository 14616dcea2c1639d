"""Assertion helpers shared by the pipeline tests (the fixtures live in conftest.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from foundation.core.media import Media
from pipelines.runtime.resume import DenoiseCheckpoint

if TYPE_CHECKING:
    from foundation.core.catalog import Catalog
    from pipelines.families.ltx2 import LTX2TextToVideo
    from pipelines.runtime.cache import ModelCache


def ltx2_adapter(model_cache: ModelCache, catalog: Catalog, model: str) -> LTX2TextToVideo:
    """The session's loaded LTX-2 adapter of ``model`` (one load per test session)."""
    from pipelines.families.ltx2 import LTX2TextToVideo

    adapter = model_cache.get(catalog.models[model])
    assert isinstance(adapter, LTX2TextToVideo)
    return adapter


def frames_of(media: Media) -> np.ndarray:
    """All frames of ``media`` as one (F, H, W, 3) uint8 array, checking every chunk on the way."""
    chunks = list(media.chunks)
    assert chunks, "no frames"
    for chunk in chunks:
        assert chunk.dtype == np.uint8
        assert chunk.ndim == 4 and chunk.shape[1:] == (media.height, media.width, 3)
    return np.concatenate(chunks)


class StepLog:
    """An ``on_step`` callback that records (done, total) and raises ``error`` once ``done == stop_at``."""

    def __init__(self, stop_at: int | None = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.stop_at = stop_at
        self.error = error

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))
        if self.stop_at is not None and done == self.stop_at and self.error is not None:
            raise self.error


class MemoryCheckpoints:
    """The checkpoint side of a worker, in memory: every checkpoint saved after ``every`` steps is kept as
    bytes (``to_bytes``, as a store holds them) and ``resume_at`` picks the one ``load`` hands back."""

    def __init__(self, *, every: int = 1, resume_at: int | None = None, stored: dict[int, bytes] | None = None) -> None:
        self.every = every
        self.resume_at = resume_at
        self.stored: dict[int, bytes] = stored if stored is not None else {}
        self.refusals: list[str] = []
        self.discarded: list[str] = []
        self.resumes: list[tuple[int, int]] = []

    def load(self) -> DenoiseCheckpoint | None:
        if self.resume_at is None:
            return None
        return DenoiseCheckpoint.from_bytes(self.stored[self.resume_at])

    def refused(self, reason: str) -> None:
        self.refusals.append(reason)

    def discard(self, detail: str) -> None:
        self.discarded.append(detail)
        self.resume_at = None  # deleted: the next load finds none

    def resumed(self, step: int, total: int) -> None:
        self.resumes.append((step, total))

    def due(self, step: int, total: int) -> bool:
        return step % self.every == 0

    def save(self, checkpoint: DenoiseCheckpoint) -> None:
        self.stored[checkpoint.step] = checkpoint.to_bytes()

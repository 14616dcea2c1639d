"""Assertion helpers shared by the pipeline tests (the fixtures live in conftest.py)."""

from __future__ import annotations

import numpy as np

from worker.core.media import Media


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

"""The media a model produces and the step callback it reports through: the seam between a model
family (``pipelines``) and the encoder (``foundation.media``), so neither imports the other. Also the
live ``Preview`` a model hands the worker while denoising, which the queue keeps in the job's progress log.

Frames leave as uint8 chunks so a long video never sits on the host as float32.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PREVIEW_DATA_PREFIX", "AudioTrack", "Media", "Preview", "StepCallback"]

PREVIEW_DATA_PREFIX = "data:image/jpeg;base64,"

# on_step(step_index, total_steps): reports denoising progress; raises (e.g. JobCanceled) to stop.
StepCallback = Callable[[int, int], None]


@dataclass
class AudioTrack:
    """A waveform: float32 samples shaped (channels, n), nominally in [-1, 1], at ``sample_rate`` Hz, as
    the model made it: the encoder fits it to the clip's exact length, clipped and cleaned
    (``foundation.media.frames.fit_audio``), so a model hands over its whole track."""

    samples: np.ndarray
    sample_rate: int

    @property
    def channels(self) -> int:
        return int(self.samples.shape[0])


@dataclass
class Media:
    """One generated clip at generation size (``width`` x ``height``, a multiple of the stride).

    ``chunks`` yields uint8 arrays shaped (n, height, width, 3), in order, ``num_frames`` in total; it can
    be consumed once. The encoder keeps the first ``keep_frames`` and center-crops to the target size, and
    trims or pads ``audio`` to exactly as long as those frames.
    """

    width: int
    height: int
    fps: float
    num_frames: int
    chunks: Iterator[np.ndarray]
    audio: AudioTrack | None = None


class Preview(BaseModel):
    """A small picture of a running job's latents at denoising step ``step`` of ``total``
    (``pipelines.runtime.previews``): the data of an ``event: preview`` on the live event stream.
    ``image`` is a JPEG as a data URL, at most 256 px wide and about 20 KB."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    step: int = Field(ge=0)
    total: int = Field(ge=1)
    image: str = Field(pattern=r"^data:image/jpeg;base64,[A-Za-z0-9+/=]+$")

    @classmethod
    def of_jpeg(cls, step: int, total: int, jpeg: bytes) -> Preview:
        return cls(step=step, total=total, image=PREVIEW_DATA_PREFIX + base64.b64encode(jpeg).decode("ascii"))

    def jpeg(self) -> bytes:
        """The JPEG bytes of ``image``."""
        return base64.b64decode(self.image.removeprefix(PREVIEW_DATA_PREFIX))

"""Frame and audio shaping for the encoder: crop geometry, exact frame rates, audio trimmed to the clip.

All of it is pure numpy/fractions so it can be tested without ffmpeg.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from foundation.core.media import AudioTrack

__all__ = ["CropBox", "audio_sample_count", "center_crop_box", "exact_fps", "fit_audio", "output_box"]


@dataclass(frozen=True)
class CropBox:
    """A ``width`` x ``height`` window whose top-left corner is at (``x``, ``y``)."""

    x: int
    y: int
    width: int
    height: int

    def apply(self, frames: np.ndarray) -> np.ndarray:
        """A view (no copy) of ``frames`` shaped (n, H, W, 3) cut to this window."""
        return frames[:, self.y : self.y + self.height, self.x : self.x + self.width]


def center_crop_box(source_width: int, source_height: int, width: int, height: int) -> CropBox:
    """The centered ``width`` x ``height`` window of a source frame; odd margins put the extra pixel
    on the right/bottom (the same rule as ffmpeg's ``crop`` filter)."""
    if width > source_width or height > source_height:
        raise ValueError(f"cannot crop {source_width}x{source_height} to a larger {width}x{height}")
    if width <= 0 or height <= 0:
        raise ValueError(f"crop size must be positive, got {width}x{height}")
    return CropBox((source_width - width) // 2, (source_height - height) // 2, width, height)


def output_box(source_width: int, source_height: int, width: int, height: int) -> CropBox:
    """The centred window of a source frame that becomes a ``width`` x ``height`` output.

    A source that covers the output is cropped to exactly its size (a pipeline generates at or above the size
    on its stride). One smaller in a dimension (a size its model lists below the output, such as 1280x704 for
    720p, or an image-to-video generation that keeps the input's aspect) gives the largest window of the
    output's aspect, which the encoder then scales to the output: the picture is never stretched."""
    if width <= source_width and height <= source_height:
        return center_crop_box(source_width, source_height, width, height)
    crop_width = min(source_width, max(1, round(source_height * width / height)))
    crop_height = min(source_height, max(1, round(source_width * height / width)))
    return center_crop_box(source_width, source_height, crop_width, crop_height)


def exact_fps(fps: float) -> Fraction:
    """``fps`` as an exact rational: 24.0 -> 24, 24000/1001 (as a float) -> 24000/1001.

    Video rates are integers or NTSC-style n*1000/1001; 1001 is the largest denominator they need.
    """
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    return Fraction(fps).limit_denominator(1001)


def audio_sample_count(frames: int, fps: Fraction, sample_rate: int) -> int:
    """Samples that last exactly as long as ``frames`` video frames (rounded to the nearest sample)."""
    return round(Fraction(frames) * sample_rate / fps)


def fit_audio(track: AudioTrack, samples: int) -> np.ndarray:
    """The track as float32 (channels, ``samples``) in [-1, 1]: trimmed, or padded with silence."""
    data = np.asarray(track.samples, dtype=np.float32)
    if data.ndim == 1:
        data = data[None, :]
    if data.ndim != 2 or data.shape[0] < 1:
        raise ValueError(f"audio must be shaped (channels, samples), got {data.shape}")
    have = data.shape[1]
    data = data[:, :samples] if have >= samples else np.pad(data, ((0, 0), (0, samples - have)))
    # NaN would poison the AAC encoder's state; treat it as silence.
    return np.clip(np.nan_to_num(data, nan=0.0), -1.0, 1.0)

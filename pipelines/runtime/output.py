"""From a decoded video (and audio) on the device to ``Media``: the shape checked against the job, frames leaving the
device as uint8 a few at a time, so the host never holds the video as float32."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from foundation.core.errors import ErrorCode, JobError
from foundation.core.media import AudioTrack, Media

if TYPE_CHECKING:
    import torch

    from foundation.core.resolve import ResolvedJob

__all__ = ["CHUNK_FRAMES", "audio_track", "media_from_video", "uint8_chunks"]


# Frames converted per step: bounds the temporary float copy to a few frames whatever the video length.
CHUNK_FRAMES = 8


def media_from_video(model_id: str, job: ResolvedJob, video: torch.Tensor, audio: AudioTrack | None = None) -> Media:
    """The ``Media`` of a decoded video (1, C, F, H, W) in [-1, 1], after checking it has the job's shape.

    Frames are converted lazily: they leave the device as uint8 chunks when the encoder pulls them.
    """
    _, _, frames, height, width = video.shape
    if (frames, height, width) != (job.num_frames, job.gen_height, job.gen_width):
        raise JobError(
            ErrorCode.pipeline_error,
            f"{model_id} produced {frames}x{height}x{width}, expected "
            f"{job.num_frames}x{job.gen_height}x{job.gen_width}",
        )
    return Media(
        width=width, height=height, fps=float(job.fps), num_frames=frames, chunks=uint8_chunks(video), audio=audio
    )


def uint8_chunks(video: torch.Tensor, chunk_frames: int = CHUNK_FRAMES) -> Iterator[np.ndarray]:
    """Yield a decoded video (1, C, F, H, W) in [-1, 1] as uint8 (n, H, W, C) host arrays, ``chunk_frames`` at a time.

    Quantising happens on the tensor's device, so a GPU copies bytes, not floats, to the host. The rounding
    matches diffusers' own postprocessing ((x / 2 + 0.5).clamp(0, 1) * 255, rounded).
    """
    import torch

    frames = video.shape[2]
    for start in range(0, frames, chunk_frames):
        part = video[0, :, start : start + chunk_frames]
        with torch.no_grad():
            scaled = (part.float() / 2 + 0.5).clamp_(0, 1).mul_(255).round_()
            quantised = scaled.to(torch.uint8).permute(1, 2, 3, 0).contiguous()
        yield quantised.cpu().numpy()


def audio_track(waveform: torch.Tensor, sample_rate: int) -> AudioTrack:
    """A (1, channels, n) waveform as float32 host samples, whole: the encoder fits the track to the
    clip's exact length, and clips and cleans it, in one place (``foundation.media.frames.fit_audio``)."""
    samples = waveform[0].float().cpu().numpy()
    return AudioTrack(samples=np.ascontiguousarray(samples, dtype=np.float32), sample_rate=int(sample_rate))

"""Checks on what a worker produced: objects fetched as a client would, MP4s decoded with PyAV."""

from __future__ import annotations

import io
import urllib.request
from fractions import Fraction

import av
import numpy as np

from foundation.stores.base import ArtifactStore


def fetch_object(store: ArtifactStore, key: str) -> bytes:
    """Download ``key`` through a freshly signed URL (S3-compatible store)."""
    url = store.sign_url(key).url
    with urllib.request.urlopen(url, timeout=30) as resp:
        return bytes(resp.read())


def assert_playable_mp4(
    data: bytes, *, width: int, height: int, frames: int, duration_s: float, audio_channels: int | None
) -> None:
    """Decode every frame: size, frame count and duration as promised; audio present iff expected, and
    exactly as long as ``duration_s`` (its stream's duration, in samples, as the MP4's edit list gives it)."""
    with av.open(io.BytesIO(data)) as container:
        assert container.format.name.startswith("mov"), container.format.name
        video = container.streams.video[0]
        assert video.codec_context.name == "h264"
        assert (video.codec_context.width, video.codec_context.height) == (width, height)
        audio = list(container.streams.audio)
        if audio_channels is None:
            assert audio == []
        else:
            assert len(audio) == 1 and audio[0].codec_context.name == "aac"
            assert audio[0].codec_context.channels == audio_channels
            track = audio[0]
            assert track.duration is not None and track.time_base is not None
            assert track.duration * track.time_base == Fraction(duration_s)
        decoded = sum(1 for _ in container.decode(video=0))
        assert decoded == frames
        assert video.duration is not None and video.time_base is not None
        assert abs(float(video.duration * video.time_base) - duration_s) < 1e-3


def decoded_frames(data: bytes) -> np.ndarray:
    """Every video frame of an MP4 as one (F, H, W, 3) uint8 array."""
    with av.open(io.BytesIO(data)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])

"""Encoder settings (the ``encoder`` section of ``Settings``; env ``GENWORKER_ENCODER__*``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

__all__ = ["EncoderSettings"]

# A bare word: it lands on ffmpeg's command line, so no spaces and no leading dash.
_Word = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]{1,32}$")]


class EncoderSettings(BaseModel):
    codec: Literal["auto", "libx264", "h264_nvenc"] = Field(
        default="auto",
        description=(
            '"auto": h264_nvenc when ffmpeg lists it, a CUDA device is present and a one-frame trial encode '
            "works (an H100 has CUDA but no NVENC unit); otherwise libx264."
        ),
    )
    preset: _Word = Field(
        default="medium",
        description=(
            "libx264 speed/quality trade-off (ultrafast .. veryslow) and constant-quality level (lower = better)."
        ),
    )
    crf: int = Field(default=20, ge=0, le=51, description="libx264 constant-quality level (lower = better, larger).")
    nvenc_preset: _Word = Field(
        default="p5", description="h264_nvenc equivalents: preset p1 (fastest) .. p7 (best), constant-quality level."
    )
    nvenc_cq: int = Field(default=21, ge=0, le=51, description="h264_nvenc constant-quality level.")
    threads: int = Field(
        default=0, ge=0, le=256, description="ffmpeg encoder threads; 0 lets ffmpeg choose (all cores)."
    )
    audio_bitrate_kbps: int = Field(default=128, ge=16, le=512, description="AAC bitrate when the model makes audio.")
    poster: Literal["first", "middle"] = Field(
        default="middle",
        description="The poster is a frame of the kept clip, captured while streaming (chunks are consumed once).",
    )
    poster_quality: int = Field(default=90, ge=1, le=95, description="JPEG quality of the poster.")
    finish_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description=(
            "How long ffmpeg may take to finish after the last frame was written (faststart rewrites the file)."
        ),
    )

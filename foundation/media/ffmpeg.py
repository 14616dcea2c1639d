"""The ffmpeg side of encoding: which binary, which H.264 encoder, and the exact command line.

The binary is the static build that imageio-ffmpeg ships (libx264, native AAC, h264_nvenc), so no
system ffmpeg is needed. Frames come in on stdin as raw rgb24; audio, when present, from a small raw
float32 file (feeding two pipes at once from one thread would deadlock).
"""

from __future__ import annotations

import functools
import logging
import subprocess
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from foundation.media.config import EncoderSettings
from foundation.media.errors import EncoderUnavailable

__all__ = [
    "AudioInput",
    "VideoInput",
    "build_command",
    "ffmpeg_exe",
    "ffmpeg_problem",
    "list_encoders",
    "resolve_codec",
]

log = logging.getLogger("genworker.encoder")


def ffmpeg_exe() -> str:
    """The binary to run; ``EncoderUnavailable`` when there is none (``IMAGEIO_FFMPEG_EXE`` overrides)."""
    import imageio_ffmpeg

    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except RuntimeError as e:  # imageio-ffmpeg's way of saying it found no binary anywhere
        raise EncoderUnavailable(str(e)) from e


def ffmpeg_problem(ffmpeg: str) -> str | None:
    """Why ``ffmpeg`` cannot run at all (missing, not executable, crashes on ``-version``), or None.

    An encode that failed asks this to tell "this worker's ffmpeg is broken" (any job would fail
    here, another worker may succeed) from "ffmpeg refused this job's input" (it fails everywhere).
    """
    try:
        done = subprocess.run([ffmpeg, "-hide_banner", "-version"], capture_output=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return f"{ffmpeg} -version did not answer within 30 s"
    except OSError as e:
        return f"cannot run {ffmpeg}: {e}"
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", errors="replace").strip()[-300:]
        return f"{ffmpeg} -version exited with {done.returncode}: {tail or '(no output on stderr)'}"
    return None


@functools.cache
def list_encoders(ffmpeg: str) -> frozenset[str]:
    """Names of the encoders ``ffmpeg -encoders`` lists (cached per binary)."""
    out = subprocess.run(
        [ffmpeg, "-hide_banner", "-encoders"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        # Rows look like " V....D libx264   libx264 H.264 ..."; the legend above uses "V..... = Video".
        if len(parts) >= 2 and len(parts[0]) == 6 and parts[0][0] in "VAS" and parts[1] != "=":
            names.add(parts[1])
    return frozenset(names)


def _cuda_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@functools.cache
def _nvenc_works(ffmpeg: str) -> bool:
    """Listing h264_nvenc proves nothing: the GPU may have no NVENC unit (H100) or the driver no
    libnvidia-encode. One tiny trial encode tells."""
    trial = [ffmpeg, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "color=black:s=256x256:d=0.1"]
    trial += ["-frames:v", "1", "-c:v", "h264_nvenc", "-f", "null", "-"]
    try:
        result = subprocess.run(trial, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if result.returncode != 0:
        log.info("h264_nvenc is listed but unusable here; using libx264", extra={"stderr": result.stderr[-300:]})
    return result.returncode == 0


def resolve_codec(settings: EncoderSettings, ffmpeg: str) -> str:
    """The H.264 encoder to use: the configured one, or for ``auto`` nvenc only where it really works."""
    if settings.codec != "auto":
        return settings.codec
    if "h264_nvenc" in list_encoders(ffmpeg) and _cuda_present() and _nvenc_works(ffmpeg):
        return "h264_nvenc"
    return "libx264"


@dataclass(frozen=True)
class VideoInput:
    width: int
    height: int
    fps: Fraction
    frames: int
    # The output size when it differs from the input's (the frames are scaled to it); None: the input's size.
    scale_to: tuple[int, int] | None = None


@dataclass(frozen=True)
class AudioInput:
    path: Path
    sample_rate: int
    channels: int


def _fraction_arg(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _video_codec_args(codec: str, settings: EncoderSettings) -> list[str]:
    if codec == "h264_nvenc":
        args = ["-c:v", "h264_nvenc", "-preset", settings.nvenc_preset, "-tune", "hq"]
        return [*args, "-rc", "vbr", "-cq", str(settings.nvenc_cq), "-b:v", "0"]
    args = ["-c:v", codec, "-preset", settings.preset, "-crf", str(settings.crf)]
    return [*args, "-threads", str(settings.threads)]


def build_command(
    ffmpeg: str,
    *,
    video: VideoInput,
    audio: AudioInput | None,
    codec: str,
    settings: EncoderSettings,
    output: Path,
) -> list[str]:
    """ffmpeg arguments that read ``video.frames`` rgb24 frames from stdin and write an MP4."""
    rate = _fraction_arg(video.fps)
    cmd = [ffmpeg, "-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-y"]
    cmd += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{video.width}x{video.height}"]
    cmd += ["-framerate", rate, "-i", "pipe:0"]
    if audio is not None:
        cmd += ["-f", "f32le", "-ar", str(audio.sample_rate), "-ac", str(audio.channels), "-i", str(audio.path)]
    cmd += ["-map", "0:v:0"]
    if audio is not None:
        cmd += ["-map", "1:a:0"]
    # RGB -> YUV with the BT.709 matrix and tag it so players do not guess (HD content is 709); one scale filter
    # also resizes (Lanczos) when the frames are not the output's size.
    resize = f"w={video.scale_to[0]}:h={video.scale_to[1]}:flags=lanczos:" if video.scale_to is not None else ""
    cmd += ["-vf", f"scale={resize}out_color_matrix=bt709:out_range=tv,format=yuv420p"]
    cmd += ["-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv"]
    cmd += _video_codec_args(codec, settings)
    cmd += ["-pix_fmt", "yuv420p", "-frames:v", str(video.frames)]
    if audio is not None:
        # The audio file already lasts exactly frames/fps seconds: no -shortest (it cuts at packet edges).
        cmd += ["-c:a", "aac", "-b:a", f"{settings.audio_bitrate_kbps}k"]
    cmd += ["-movflags", "+faststart", "-f", "mp4", str(output)]
    return cmd

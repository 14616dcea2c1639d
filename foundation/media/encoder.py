"""The encoder: a generated clip (uint8 chunks) -> an H.264/AAC MP4 and a JPEG poster, streaming.

Chunks go one at a time, center-cropped by a numpy view, into the stdin of the imageio-ffmpeg binary (which
scales them to the output size when a model generated below it: ``frames.output_box``);
ffmpeg's stderr goes to a temp file (a pipe nobody reads would fill and deadlock it). Memory therefore
stays at about one chunk whatever the clip's length. Exactly ``keep_frames`` frames are written; the
rest of the chunks are never pulled. Audio is trimmed or padded to exactly ``keep_frames / fps``
seconds, so the MP4 lasts exactly the requested duration without ``-shortest``.

    encoded = encode_video(media, keep_frames=96, width=432, height=240, out_dir=work, settings=s)
    for artifact, path in encoded.artifacts():   # (Artifact with key = file name, local path)
        store.put_file(artifact_key(job_id, attempt, claim_tag, path.name), path, content_type=...)

Errors: ffmpeg failing on this job -> ``JobError(encode_failed)`` with its stderr tail; media that
breaks its own contract (too few frames, wrong chunk shape or dtype) -> ``JobError(pipeline_error)``.
Faults of this machine rather than of the job (the worker releases the job and backs off):
ffmpeg missing, not executable or failing a bare ``-version`` -> ``EncoderUnavailable``; no space
left in the output directory -> ``WorkDiskFull``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import subprocess
import tempfile
from collections.abc import Generator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO

import numpy as np

from foundation.core.contract import Artifact, AudioInfo
from foundation.core.errors import ErrorCode, JobError
from foundation.core.media import Media
from foundation.media.config import EncoderSettings
from foundation.media.errors import EncoderUnavailable, WorkDiskFull
from foundation.media.ffmpeg import AudioInput, VideoInput, build_command, ffmpeg_exe, ffmpeg_problem, resolve_codec
from foundation.media.frames import CropBox, audio_sample_count, exact_fps, fit_audio, output_box

__all__ = ["EncodedFile", "EncodedVideo", "EncoderSettings", "encode_video"]

VIDEO_FILE = "video.mp4"
POSTER_FILE = "poster.jpg"
_STDERR_TAIL_CHARS = 2000
_NO_SPACE = "No space left on device"  # strerror(ENOSPC), as ffmpeg prints it

Frames = Generator[np.ndarray, None, None]


@dataclass(frozen=True)
class EncodedFile:
    path: Path
    content_type: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class EncodedVideo:
    """The MP4 and its poster on local disk, with the metadata a record's ``Artifact`` needs."""

    video: EncodedFile
    poster: EncodedFile
    codec: str  # the H.264 encoder actually used (libx264 or h264_nvenc)
    width: int
    height: int
    fps: float
    frames: int
    duration_seconds: float
    audio: AudioInfo | None

    def video_artifact(self, key: str) -> Artifact:
        v = self.video
        return Artifact(
            kind="video",
            key=key,
            content_type=v.content_type,
            bytes=v.bytes,
            sha256=v.sha256,
            width=self.width,
            height=self.height,
            fps=self.fps,
            frames=self.frames,
            duration_seconds=self.duration_seconds,
            audio=self.audio,
        )

    def poster_artifact(self, key: str) -> Artifact:
        p = self.poster
        return Artifact(
            kind="poster",
            key=key,
            content_type=p.content_type,
            bytes=p.bytes,
            sha256=p.sha256,
            width=self.width,
            height=self.height,
        )

    def artifacts(self) -> list[tuple[Artifact, Path]]:
        """Both artifacts with their local paths; each ``key`` is the file name until uploaded."""
        return [
            (self.video_artifact(self.video.path.name), self.video.path),
            (self.poster_artifact(self.poster.path.name), self.poster.path),
        ]


def encode_video(
    media: Media, *, keep_frames: int, width: int, height: int, out_dir: Path, settings: EncoderSettings
) -> EncodedVideo:
    """Encode the first ``keep_frames`` frames of ``media``, center-cropped to ``width`` x ``height`` (or to its
    aspect and scaled, for media smaller than that in a dimension), into ``out_dir/video.mp4`` (+
    ``out_dir/poster.jpg``). Consumes ``media.chunks``."""
    crop = _check_request(media, keep_frames, width, height)
    fps = exact_fps(media.fps)
    out_dir.mkdir(parents=True, exist_ok=True)
    video_path, poster_path = out_dir / VIDEO_FILE, out_dir / POSTER_FILE
    ffmpeg = ffmpeg_exe()
    try:
        codec = resolve_codec(settings, ffmpeg)
    except OSError as e:  # the encoder probe could not even start the binary
        raise EncoderUnavailable(f"cannot run ffmpeg {ffmpeg}: {e}") from e
    poster_index = 0 if settings.poster == "first" else keep_frames // 2
    scale_to = None if (crop.width, crop.height) == (width, height) else (width, height)
    with contextlib.ExitStack() as stack:
        audio = _write_audio(media, keep_frames, fps, out_dir, stack)
        cmd = build_command(
            ffmpeg,
            video=VideoInput(crop.width, crop.height, fps, keep_frames, scale_to=scale_to),
            audio=audio,
            codec=codec,
            settings=settings,
            output=video_path,
        )
        stderr = stack.enter_context(tempfile.TemporaryFile())
        try:
            frames = _checked_chunks(media)
            poster_frame = _run_ffmpeg(
                cmd,
                chunks=frames,
                crop=crop,
                keep_frames=keep_frames,
                poster_index=poster_index,
                stderr=stderr,
                settings=settings,
            )
        except BaseException:
            video_path.unlink(missing_ok=True)
            raise
    _write_poster(poster_frame, poster_path, settings.poster_quality, size=(width, height))
    audio_info = None
    if media.audio is not None:
        audio_info = AudioInfo(codec="aac", sample_rate=media.audio.sample_rate, channels=media.audio.channels)
    return EncodedVideo(
        video=_describe(video_path, "video/mp4"),
        poster=_describe(poster_path, "image/jpeg"),
        codec=codec,
        width=width,
        height=height,
        fps=float(fps),
        frames=keep_frames,
        duration_seconds=float(Fraction(keep_frames) / fps),
        audio=audio_info,
    )


def _check_request(media: Media, keep_frames: int, width: int, height: int) -> CropBox:
    if keep_frames < 1:
        raise JobError(ErrorCode.encode_failed, f"keep_frames must be at least 1, got {keep_frames}")
    if keep_frames > media.num_frames:
        raise JobError(ErrorCode.pipeline_error, f"need {keep_frames} frames, the media has {media.num_frames}")
    if width % 2 or height % 2:
        # yuv420p subsamples chroma 2x2: libx264 and nvenc refuse odd sizes.
        raise JobError(ErrorCode.encode_failed, f"H.264 yuv420p needs even dimensions, got {width}x{height}")
    try:
        return output_box(media.width, media.height, width, height)
    except ValueError as e:
        raise JobError(ErrorCode.pipeline_error, str(e)) from None


def _write_audio(
    media: Media, keep_frames: int, fps: Fraction, out_dir: Path, stack: contextlib.ExitStack
) -> AudioInput | None:
    """The audio, cut to the clip's exact length, as a raw interleaved float32 file (deleted on exit)."""
    if media.audio is None:
        return None
    track = media.audio
    samples = fit_audio(track, audio_sample_count(keep_frames, fps, track.sample_rate))
    handle = stack.enter_context(tempfile.NamedTemporaryFile(dir=out_dir, suffix=".f32le"))  # noqa: SIM115
    np.ascontiguousarray(samples.T, dtype="<f4").tofile(handle)
    handle.flush()
    return AudioInput(Path(handle.name), track.sample_rate, samples.shape[0])


def _run_ffmpeg(
    cmd: list[str],
    *,
    chunks: Frames,
    crop: CropBox,
    keep_frames: int,
    poster_index: int,
    stderr: IO[bytes],
    settings: EncoderSettings,
) -> np.ndarray:
    """Run ffmpeg while streaming frames into it; return the poster frame."""
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr)
    except OSError as e:
        raise EncoderUnavailable(f"cannot start ffmpeg: {e}") from e
    assert proc.stdin is not None
    poster: np.ndarray | None = None
    try:
        poster = _stream_frames(proc.stdin, chunks, crop, keep_frames, poster_index)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        returncode = proc.wait(timeout=settings.finish_timeout_s)
    except subprocess.TimeoutExpired:
        raise JobError(ErrorCode.encode_failed, f"ffmpeg did not finish within {settings.finish_timeout_s}s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    if returncode != 0 or poster is None:
        raise _encode_error(cmd[0], returncode, _tail(stderr))
    return poster


def _encode_error(ffmpeg: str, returncode: int, tail: str) -> Exception:
    """Whose fault a failed encode is: this machine's (disk, binary) or the job's."""
    if _NO_SPACE in tail:
        return WorkDiskFull(f"ffmpeg ran out of disk space (exit {returncode}): {tail}")
    problem = ffmpeg_problem(ffmpeg)
    if problem is not None:
        return EncoderUnavailable(f"ffmpeg failed (exit {returncode}) and is broken: {problem}")
    return JobError(ErrorCode.encode_failed, f"ffmpeg failed (exit {returncode}): {tail}")


def _stream_frames(
    sink: IO[bytes], chunks: Frames, crop: CropBox, keep_frames: int, poster_index: int
) -> np.ndarray | None:
    """Write exactly ``keep_frames`` cropped frames; None when ffmpeg closed its stdin early (it died).

    Pulls no chunk beyond the last one needed, and holds no chunk after writing it.
    """
    written = 0
    poster: np.ndarray | None = None
    try:
        for chunk in chunks:
            part = crop.apply(chunk)[: keep_frames - written]
            del chunk
            if written <= poster_index < written + len(part):
                poster = part[poster_index - written].copy()
            try:
                sink.write(np.ascontiguousarray(part).data)
            except BrokenPipeError:
                return None
            written += len(part)
            del part
            if written == keep_frames:
                break
    finally:
        chunks.close()  # upstream generators release their state now, not at garbage collection
    if written < keep_frames:
        raise JobError(ErrorCode.pipeline_error, f"media ended after {written} of {keep_frames} frames")
    return poster


def _checked_chunks(media: Media) -> Frames:
    """``media.chunks``, refusing any chunk that breaks the ``Media`` contract (a pipeline bug)."""
    chunks = media.chunks
    expected = (media.height, media.width, 3)
    seen = 0
    try:
        for chunk in chunks:
            if not isinstance(chunk, np.ndarray) or chunk.dtype != np.uint8 or chunk.shape[1:] != expected:
                got = f"{getattr(chunk, 'dtype', type(chunk).__name__)} {getattr(chunk, 'shape', '')}"
                message = f"chunk after frame {seen} is {got}, not uint8 shaped (n, *{expected})"
                raise JobError(ErrorCode.pipeline_error, message)
            seen += len(chunk)
            yield chunk
            del chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _write_poster(frame: np.ndarray, path: Path, quality: int, *, size: tuple[int, int]) -> None:
    from PIL import Image

    image = Image.fromarray(frame)
    if image.size != size:  # scaled like the video's frames
        image = image.resize(size, Image.Resampling.LANCZOS)
    try:
        image.save(path, format="JPEG", quality=quality, optimize=True)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise WorkDiskFull(f"cannot write the poster: {e}") from e
        raise JobError(ErrorCode.encode_failed, f"cannot write the poster: {e}") from e


def _describe(path: Path, content_type: str) -> EncodedFile:
    with path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256")
        size = f.tell()
    return EncodedFile(path=path, content_type=content_type, bytes=size, sha256=digest.hexdigest())


def _tail(stderr: IO[bytes]) -> str:
    stderr.seek(0, 2)
    size = stderr.tell()
    stderr.seek(max(0, size - _STDERR_TAIL_CHARS))
    text = stderr.read().decode("utf-8", errors="replace").strip()
    return text or "(no output on stderr)"

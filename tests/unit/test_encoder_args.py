"""Pure pieces of the encoder: crop geometry, exact rates, audio fitting, the ffmpeg command line."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundation.core.media import AudioTrack
from foundation.media.config import EncoderSettings
from foundation.media.ffmpeg import AudioInput, VideoInput, build_command, resolve_codec
from foundation.media.frames import audio_sample_count, center_crop_box, exact_fps, fit_audio, output_box


@pytest.mark.parametrize(
    ("source", "target", "corner"),
    [((448, 256), (432, 240), (8, 8)), ((160, 256), (144, 256), (8, 0)), ((256, 144), (256, 144), (0, 0))],
)
def test_center_crop_box(source: tuple[int, int], target: tuple[int, int], corner: tuple[int, int]) -> None:
    box = center_crop_box(*source, *target)
    assert (box.x, box.y, box.width, box.height) == (*corner, *target)


@given(st.integers(2, 400), st.integers(2, 400), st.data())
def test_crop_box_is_centered_within_a_pixel(sw: int, sh: int, data: st.DataObject) -> None:
    w, h = data.draw(st.integers(1, sw)), data.draw(st.integers(1, sh))
    box = center_crop_box(sw, sh, w, h)
    left, right = box.x, sw - box.x - w
    top, bottom = box.y, sh - box.y - h
    assert 0 <= right - left <= 1 and 0 <= bottom - top <= 1
    frames = np.zeros((1, sh, sw, 3), np.uint8)
    assert box.apply(frames).shape == (1, h, w, 3)


def test_crop_box_refuses_a_larger_target() -> None:
    with pytest.raises(ValueError, match="larger"):
        center_crop_box(256, 144, 272, 144)


@pytest.mark.parametrize(
    ("source", "target", "window"),
    [
        ((448, 256), (432, 240), (432, 240)),  # covers the output: cropped to exactly its size
        ((1280, 704), (1280, 720), (1252, 704)),  # TI2V-5B / LTX-2 720p: the 16:9 window of 1280x704
        ((704, 1280), (720, 1280), (704, 1252)),
        ((720, 544), (832, 480), (720, 415)),  # a 4:3 image's generation delivered as 16:9
        ((624, 624), (480, 832), (360, 624)),  # a square one delivered as 9:16
    ],
)
def test_output_box_is_the_outputs_aspect_when_the_source_is_smaller(
    source: tuple[int, int], target: tuple[int, int], window: tuple[int, int]
) -> None:
    box = output_box(*source, *target)
    assert (box.width, box.height) == window
    assert box.width <= source[0] and box.height <= source[1]
    assert abs(box.width / box.height - target[0] / target[1]) < 1 / min(window)


def test_the_command_scales_only_frames_that_are_not_the_output_size() -> None:
    plain = _command(None)
    assert _after(plain, "-vf") == "scale=out_color_matrix=bt709:out_range=tv,format=yuv420p"
    scaled = build_command(
        "ffmpeg",
        video=VideoInput(1252, 704, Fraction(24), 121, scale_to=(1280, 720)),
        audio=None,
        codec="libx264",
        settings=EncoderSettings(),
        output=Path("out/video.mp4"),
    )
    assert _after(scaled, "-s") == "1252x704"  # what arrives on stdin
    assert (
        _after(scaled, "-vf") == "scale=w=1280:h=720:flags=lanczos:out_color_matrix=bt709:out_range=tv,format=yuv420p"
    )


@pytest.mark.parametrize(
    ("fps", "exact"),
    [
        (16.0, Fraction(16)),
        (24.0, Fraction(24)),
        (24000 / 1001, Fraction(24000, 1001)),
        (30000 / 1001, Fraction(30000, 1001)),
        (12.5, Fraction(25, 2)),
    ],
)
def test_exact_fps(fps: float, exact: Fraction) -> None:
    assert exact_fps(fps) == exact


def test_audio_sample_count_is_exactly_the_video_length() -> None:
    assert audio_sample_count(48, Fraction(24), 24_000) == 48_000
    assert audio_sample_count(81, Fraction(16), 48_000) == 243_000
    assert audio_sample_count(24, Fraction(24000, 1001), 48_000) == 48_048


def test_fit_audio_trims_pads_and_cleans() -> None:
    samples = np.array([[0.5, -2.0, np.nan, 0.1], [0.2, 0.3, 0.4, 0.5]], np.float32)
    track = AudioTrack(samples, 8000)
    trimmed = fit_audio(track, 2)
    assert trimmed.tolist() == [[0.5, -1.0], [pytest.approx(0.2), pytest.approx(0.3)]]
    padded = fit_audio(track, 6)
    assert padded.shape == (2, 6) and padded.dtype == np.float32
    assert padded[0, 2] == 0.0  # NaN became silence
    assert padded[:, 4:].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    mono = fit_audio(AudioTrack(np.ones(3, np.float32), 8000), 5)
    assert mono.tolist() == [[1.0, 1.0, 1.0, 0.0, 0.0]]


def _command(audio: AudioInput | None, codec: str = "libx264", **settings: object) -> list[str]:
    return build_command(
        "ffmpeg",
        video=VideoInput(432, 240, Fraction(24000, 1001), 48),
        audio=audio,
        codec=codec,
        settings=EncoderSettings(**settings),  # type: ignore[arg-type]
        output=Path("out/video.mp4"),
    )


def _after(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_command_without_audio() -> None:
    cmd = _command(None, preset="veryfast", crf=23)
    assert _after(cmd, "-framerate") == "24000/1001"
    assert _after(cmd, "-s") == "432x240"
    assert _after(cmd, "-i") == "pipe:0"
    assert (_after(cmd, "-c:v"), _after(cmd, "-preset"), _after(cmd, "-crf")) == ("libx264", "veryfast", "23")
    assert _after(cmd, "-pix_fmt") == "rgb24" and cmd[cmd.index("-pix_fmt", cmd.index("-c:v")) + 1] == "yuv420p"
    assert _after(cmd, "-movflags") == "+faststart"
    assert _after(cmd, "-frames:v") == "48"
    assert "-c:a" not in cmd and "1:a:0" not in cmd
    assert "-shortest" not in cmd
    assert cmd[-1] == "out/video.mp4"


def test_command_with_audio() -> None:
    cmd = _command(AudioInput(Path("a.f32le"), 24_000, 2), audio_bitrate_kbps=96)
    audio_input = cmd.index("f32le")
    assert cmd[audio_input : audio_input + 7] == ["f32le", "-ar", "24000", "-ac", "2", "-i", "a.f32le"]
    assert "1:a:0" in cmd
    assert (_after(cmd, "-c:a"), _after(cmd, "-b:a")) == ("aac", "96k")
    assert "-shortest" not in cmd


def test_command_for_nvenc() -> None:
    cmd = _command(None, codec="h264_nvenc", nvenc_preset="p6", nvenc_cq=25)
    assert (_after(cmd, "-c:v"), _after(cmd, "-preset"), _after(cmd, "-cq")) == ("h264_nvenc", "p6", "25")
    assert "-crf" not in cmd


def test_explicit_codec_is_used_as_configured() -> None:
    assert resolve_codec(EncoderSettings(codec="libx264"), "/nonexistent/ffmpeg") == "libx264"
    assert resolve_codec(EncoderSettings(codec="h264_nvenc"), "/nonexistent/ffmpeg") == "h264_nvenc"


@pytest.mark.parametrize("preset", ["-y", "fast; rm", "a b", ""])
def test_settings_refuse_words_that_are_not_presets(preset: str) -> None:
    with pytest.raises(ValueError):
        EncoderSettings(preset=preset)

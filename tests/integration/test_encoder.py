"""The encoder against the real ffmpeg binary; every output is decoded independently with PyAV."""

from __future__ import annotations

import hashlib
import struct
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from foundation.core.errors import ErrorCode, JobError
from foundation.core.media import AudioTrack, Media
from foundation.media.encoder import EncodedVideo, EncoderSettings, encode_video
from foundation.media.ffmpeg import ffmpeg_exe, list_encoders

# Fast presets keep the suite quick on 2 cores; the command line is the same as production's.
FAST = EncoderSettings(codec="libx264", preset="ultrafast", crf=18)


def frame_chunks(count: int, height: int, width: int, chunk: int = 8) -> Iterator[np.ndarray]:
    """Frames whose gray level encodes their index (frame i = 8 + 2 * i)."""
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        levels = (8 + 2 * np.arange(start, start + n)).clip(0, 255).astype(np.uint8)
        yield np.broadcast_to(levels[:, None, None, None], (n, height, width, 3)).copy()


def make_media(width: int, height: int, fps: float, frames: int, audio: AudioTrack | None = None) -> Media:
    return Media(width, height, fps, frames, frame_chunks(frames, height, width), audio)


def stereo_24k(seconds: float) -> AudioTrack:
    """LTX-2-like audio: float32 stereo at 24 kHz."""
    rng = np.random.default_rng(0)
    return AudioTrack(rng.uniform(-0.5, 0.5, (2, int(seconds * 24_000))).astype(np.float32), 24_000)


@dataclass
class Probe:
    codec: str
    pix_fmt: str
    width: int
    height: int
    rate: Fraction
    frames: int  # container's count
    decoded: int
    video_duration: float
    container_duration: float
    audio_codec: str | None
    sample_rate: int | None
    channels: int | None
    audio_duration: Fraction | None  # the stream's, in samples: exact


def probe(path: Path) -> Probe:
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        decoded = sum(1 for _ in c.decode(video=0))
        a = c.streams.audio[0] if c.streams.audio else None
        return Probe(
            codec=v.codec_context.name,
            pix_fmt=v.codec_context.pix_fmt,
            width=v.codec_context.width,
            height=v.codec_context.height,
            rate=Fraction(v.average_rate),
            frames=v.frames,
            decoded=decoded,
            video_duration=float(v.duration * v.time_base),
            container_duration=c.duration / 1_000_000,
            audio_codec=a.codec_context.name if a else None,
            sample_rate=a.codec_context.sample_rate if a else None,
            channels=a.codec_context.channels if a else None,
            audio_duration=Fraction(a.duration) * a.time_base if a else None,
        )


def top_level_atoms(path: Path) -> list[str]:
    atoms, data = [], path.read_bytes()
    pos = 0
    while pos + 8 <= len(data):
        size, name = struct.unpack(">I4s", data[pos : pos + 8])
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8 : pos + 16])[0]
        atoms.append(name.decode("latin-1"))
        if size == 0:
            break
        pos += size
    return atoms


def decode_first_frame(path: Path) -> np.ndarray:
    with av.open(str(path)) as c:
        return next(c.decode(video=0)).to_ndarray(format="rgb24")


CASES = [
    # (gen w, gen h, target w, target h, fps, generated frames, kept frames, audio)
    pytest.param(448, 256, 432, 240, 24.0, 49, 48, stereo_24k(1.5), id="240p-16:9-ltx-pad-audio"),
    pytest.param(160, 256, 144, 256, 16.0, 17, 16, None, id="144p-9:16-odd-crop-no-audio"),
    pytest.param(256, 144, 256, 144, 16.0, 33, 32, None, id="144p-16:9-no-crop-2s"),
    pytest.param(256, 256, 240, 240, 24.0, 73, 72, stereo_24k(4.0), id="240p-1:1-3s-trim-audio"),
    pytest.param(
        320,
        256,
        320,
        240,
        24000 / 1001,
        25,
        24,
        AudioTrack(np.zeros((1, 4000), np.float32), 48_000),
        id="4:3-ntsc-mono",
    ),
    pytest.param(160, 192, 144, 192, 16.0, 21, 16, None, id="144p-3:4"),
]


@pytest.mark.parametrize(("gw", "gh", "w", "h", "fps", "generated", "keep", "audio"), CASES)
def test_encoded_mp4_is_exactly_what_was_asked(
    tmp_path: Path, gw: int, gh: int, w: int, h: int, fps: float, generated: int, keep: int, audio: AudioTrack | None
) -> None:
    encoded = encode_video(
        make_media(gw, gh, fps, generated, audio), keep_frames=keep, width=w, height=h, out_dir=tmp_path, settings=FAST
    )
    p = probe(encoded.video.path)
    rate = Fraction(fps).limit_denominator(1001)
    one_frame = 1 / float(rate)
    expected_duration = keep / float(rate)

    assert (p.codec, p.pix_fmt) == ("h264", "yuv420p")
    assert (p.width, p.height) == (w, h)
    assert p.rate == rate
    assert p.frames == keep
    assert p.decoded == keep
    assert abs(p.video_duration - expected_duration) < one_frame
    assert abs(p.container_duration - expected_duration) < one_frame
    if audio is None:
        assert p.audio_codec is None
        assert encoded.audio is None
    else:
        assert (p.audio_codec, p.sample_rate, p.channels) == ("aac", audio.sample_rate, audio.channels)
        assert p.audio_duration is not None
        assert p.audio_duration == keep / rate  # exactly the kept frames' length, whatever the track's
        assert encoded.audio is not None
        assert (encoded.audio.sample_rate, encoded.audio.channels) == (audio.sample_rate, audio.channels)
    assert top_level_atoms(encoded.video.path).index("moov") < top_level_atoms(encoded.video.path).index("mdat")
    assert_metadata_matches_files(encoded, w, h, keep, float(rate))
    poster = np.asarray(Image.open(encoded.poster.path))
    assert poster.shape == (h, w, 3)


def assert_metadata_matches_files(encoded: EncodedVideo, w: int, h: int, keep: int, fps: float) -> None:
    for file in (encoded.video, encoded.poster):
        data = file.path.read_bytes()
        assert file.bytes == len(data)
        assert file.sha256 == hashlib.sha256(data).hexdigest()
    video = encoded.video_artifact("generations/g/1/video.mp4")
    assert (video.kind, video.content_type, video.key) == ("video", "video/mp4", "generations/g/1/video.mp4")
    assert (video.width, video.height, video.frames) == (w, h, keep)
    assert video.fps == pytest.approx(fps)
    assert video.duration_seconds == pytest.approx(keep / fps)
    poster = encoded.poster_artifact("generations/g/1/poster.jpg")
    assert (poster.kind, poster.content_type, poster.width, poster.height) == ("poster", "image/jpeg", w, h)
    assert [(a.key, path.name) for a, path in encoded.artifacts()] == [
        ("video.mp4", "video.mp4"),
        ("poster.jpg", "poster.jpg"),
    ]


# Colors of the bands just inside the crop, and of the margins the crop must remove.
MARGIN, LEFT, RIGHT, TOP, BOTTOM, CENTER = (
    (255, 0, 255),
    (0, 200, 0),
    (0, 0, 220),
    (220, 220, 0),
    (0, 200, 200),
    (128,) * 3,
)
BAND = 16


def bordered_frame(gw: int, gh: int, w: int, h: int) -> np.ndarray:
    """A frame whose centered w x h window has colored 16-px bands along its edges, magenta outside."""
    frame = np.empty((gh, gw, 3), np.uint8)
    frame[:] = MARGIN
    x0, y0 = (gw - w) // 2, (gh - h) // 2
    inner = frame[y0 : y0 + h, x0 : x0 + w]
    inner[:] = CENTER
    inner[:, :BAND] = LEFT
    inner[:, -BAND:] = RIGHT
    inner[:BAND, BAND:-BAND] = TOP
    inner[-BAND:, BAND:-BAND] = BOTTOM
    return frame


@pytest.mark.parametrize(("gw", "gh", "w", "h"), [(448, 256, 432, 240), (160, 256, 144, 256), (320, 320, 240, 240)])
def test_crop_is_centered(tmp_path: Path, gw: int, gh: int, w: int, h: int) -> None:
    frame = bordered_frame(gw, gh, w, h)
    media = Media(gw, gh, 16.0, 4, iter([np.stack([frame] * 4)]))
    encoded = encode_video(media, keep_frames=4, width=w, height=h, out_dir=tmp_path, settings=FAST)
    decoded = decode_first_frame(encoded.video.path).astype(int)

    def near(pixel: np.ndarray, color: tuple[int, ...]) -> bool:
        return bool(np.abs(pixel - np.array(color)).max() <= 24)

    mid_y, mid_x = h // 2, w // 2
    # Sample 4 px inside each edge and 4 px past each band: a crop off by even 2 px shifts a band.
    for x in (0, 4, BAND - 4):
        assert near(decoded[mid_y, x], LEFT), (x, decoded[mid_y, x])
        assert near(decoded[mid_y, w - 1 - x], RIGHT), (x, decoded[mid_y, w - 1 - x])
    for y in (0, 4, BAND - 4):
        assert near(decoded[y, mid_x], TOP), (y, decoded[y, mid_x])
        assert near(decoded[h - 1 - y, mid_x], BOTTOM), (y, decoded[h - 1 - y, mid_x])
    for x, y in ((BAND + 4, mid_y), (w - 1 - BAND - 4, mid_y), (mid_x, BAND + 4), (mid_x, h - 1 - BAND - 4)):
        assert near(decoded[y, x], CENTER), (x, y, decoded[y, x])
    assert not np.any(np.all(np.abs(decoded - np.array(MARGIN)) <= 40, axis=-1)), "margin color leaked in"


@pytest.mark.parametrize(
    ("gw", "gh", "w", "h", "window"),
    [
        (256, 128, 256, 144, (228, 128)),  # TI2V's 1280x704 -> 1280x720 at tiny scale: the height is short
        (224, 160, 256, 144, (224, 126)),  # an image-aspect (7:5) generation delivered as 16:9: both differ
    ],
)
def test_media_below_the_size_is_cropped_to_its_aspect_and_scaled(
    tmp_path: Path, gw: int, gh: int, w: int, h: int, window: tuple[int, int]
) -> None:
    """Generated smaller than the output in a dimension: the centred window of the output's aspect, scaled up
    (Lanczos) to exactly the output size; the picture is not stretched and nothing outside the window shows."""
    frame = bordered_frame(gw, gh, *window)
    media = Media(gw, gh, 16.0, 4, iter([np.stack([frame] * 4)]))
    encoded = encode_video(media, keep_frames=4, width=w, height=h, out_dir=tmp_path, settings=FAST)
    assert (probe(encoded.video.path).width, probe(encoded.video.path).height) == (w, h)
    with Image.open(encoded.poster.path) as poster:
        assert poster.size == (w, h)
    decoded = decode_first_frame(encoded.video.path).astype(int)
    scale = w / window[0]
    assert scale == pytest.approx(h / window[1], rel=0.01)  # one factor both ways: no stretch
    band = round(BAND * scale)

    def near(pixel: np.ndarray, color: tuple[int, ...]) -> bool:
        return bool(np.abs(pixel - np.array(color)).max() <= 32)

    mid_y, mid_x = h // 2, w // 2
    for x in (1, 4, band - 5):
        assert near(decoded[mid_y, x], LEFT), (x, decoded[mid_y, x])
        assert near(decoded[mid_y, w - 1 - x], RIGHT), (x, decoded[mid_y, w - 1 - x])
    for y in (1, 4, band - 5):
        assert near(decoded[y, mid_x], TOP), (y, decoded[y, mid_x])
        assert near(decoded[h - 1 - y, mid_x], BOTTOM), (y, decoded[h - 1 - y, mid_x])
    assert near(decoded[mid_y, mid_x], CENTER)
    assert not np.any(np.all(np.abs(decoded - np.array(MARGIN)) <= 40, axis=-1)), "margin color leaked in"


@pytest.mark.parametrize(("position", "index"), [("first", 0), ("middle", 20)])
def test_poster_is_the_configured_frame(tmp_path: Path, position: str, index: int) -> None:
    settings = FAST.model_copy(update={"poster": position})
    encoded = encode_video(
        make_media(64, 64, 16.0, 41), keep_frames=40, width=64, height=64, out_dir=tmp_path, settings=settings
    )
    poster = np.asarray(Image.open(encoded.poster.path)).astype(float)
    # Frame i has gray level 8 + 2i; neighbours differ by 2, JPEG of a flat frame is near-exact.
    assert abs(poster.mean() - (8 + 2 * index)) < 1.0


def test_chunks_are_pulled_lazily_and_released(tmp_path: Path) -> None:
    alive: list[weakref.ref[np.ndarray]] = []
    most_alive = 0
    pulled = 0
    closed = False

    def chunks() -> Iterator[np.ndarray]:
        nonlocal most_alive, pulled, closed
        try:
            for i in range(10):
                chunk = np.full((4, 64, 96, 3), i * 20, np.uint8)
                # Count the earlier chunks the encoder still holds when a new one is made.
                most_alive = max(most_alive, sum(ref() is not None for ref in alive))
                alive.append(weakref.ref(chunk))
                pulled += 1
                yield chunk
                del chunk
        finally:
            closed = True

    media = Media(96, 64, 16.0, 40, chunks())
    encode_video(media, keep_frames=12, width=64, height=64, out_dir=tmp_path, settings=FAST)
    assert pulled == 3  # 12 frames in chunks of 4: nothing past the last needed chunk
    assert most_alive == 0
    assert closed


def test_ffmpeg_failure_is_encode_failed_with_stderr(tmp_path: Path) -> None:
    bad = FAST.model_copy(update={"preset": "bogus"})
    with pytest.raises(JobError) as info:
        encode_video(make_media(64, 64, 16.0, 8), keep_frames=8, width=64, height=64, out_dir=tmp_path, settings=bad)
    assert info.value.code is ErrorCode.encode_failed
    assert "bogus" in info.value.message  # ffmpeg's own words about the preset
    assert not (tmp_path / "video.mp4").exists()


def test_media_with_too_few_frames_is_a_pipeline_error(tmp_path: Path) -> None:
    media = Media(64, 64, 16.0, 40, frame_chunks(20, 64, 64))  # claims 40, yields 20
    with pytest.raises(JobError) as info:
        encode_video(media, keep_frames=32, width=64, height=64, out_dir=tmp_path, settings=FAST)
    assert info.value.code is ErrorCode.pipeline_error
    assert "20 of 32" in info.value.message


def test_requests_the_media_cannot_satisfy_are_refused(tmp_path: Path) -> None:
    cases = [
        (dict(keep_frames=9, width=64, height=64), ErrorCode.pipeline_error),  # more than num_frames
        (dict(keep_frames=8, width=63, height=64), ErrorCode.encode_failed),  # odd width
    ]
    for kwargs, code in cases:
        with pytest.raises(JobError) as info:
            encode_video(make_media(64, 64, 16.0, 8), out_dir=tmp_path, settings=FAST, **kwargs)  # type: ignore[arg-type]
        assert info.value.code is code, kwargs


def test_chunk_of_the_wrong_shape_is_a_pipeline_error(tmp_path: Path) -> None:
    media = Media(64, 64, 16.0, 8, iter([np.zeros((8, 64, 64, 3), np.float32)]))
    with pytest.raises(JobError) as info:
        encode_video(media, keep_frames=8, width=64, height=64, out_dir=tmp_path, settings=FAST)
    assert info.value.code is ErrorCode.pipeline_error
    assert "float32" in info.value.message


def test_ffmpeg_lists_its_encoders() -> None:
    encoders = list_encoders(ffmpeg_exe())
    assert {"libx264", "aac", "h264_nvenc"} <= encoders
    assert "=" not in encoders  # the legend above the table is not an encoder


def test_auto_codec_encodes_with_what_this_machine_can_run(tmp_path: Path) -> None:
    import torch

    encoded = encode_video(
        make_media(64, 64, 16.0, 8), keep_frames=8, width=64, height=64, out_dir=tmp_path, settings=EncoderSettings()
    )
    if not torch.cuda.is_available():
        assert encoded.codec == "libx264"  # nvenc is listed by ffmpeg but there is no CUDA device
    assert encoded.codec in {"libx264", "h264_nvenc"}
    assert probe(encoded.video.path).decoded == 8

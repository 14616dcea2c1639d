"""The encoder tells "ffmpeg cannot run on this machine" (``EncoderUnavailable``: the worker releases the
job and backs off) from "ffmpeg refused this job" (``JobError(encode_failed)``), with real binaries:
none at the configured path, a script that fails every call, and the real ffmpeg given a bad option."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from foundation.core.errors import ErrorCode, JobError
from foundation.media.encoder import encode_video
from foundation.media.errors import EncoderUnavailable
from tests.integration.test_encoder import FAST, make_media


def encode(out_dir: Path, settings: object = FAST) -> None:
    encode_video(make_media(64, 64, 16.0, 8), keep_frames=8, width=64, height=64, out_dir=out_dir, settings=settings)  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", ["auto", "libx264"])  # auto lists the encoders first
def test_no_binary_at_the_configured_path_is_encoder_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(tmp_path / "no-such-ffmpeg"))
    with pytest.raises(EncoderUnavailable, match="no-such-ffmpeg"):
        encode(tmp_path / "out", FAST.model_copy(update={"codec": codec}))


def test_a_binary_that_fails_even_its_version_is_encoder_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "ffmpeg"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libx264.so' >&2\nexit 127\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(broken))
    with pytest.raises(EncoderUnavailable, match=r"libx264\.so") as raised:
        encode(tmp_path / "out")
    assert raised.value.code is ErrorCode.encode_failed
    assert not (tmp_path / "out" / "video.mp4").exists()


def test_a_working_ffmpeg_refusing_the_job_stays_encode_failed(tmp_path: Path) -> None:
    with pytest.raises(JobError) as raised:
        encode(tmp_path, FAST.model_copy(update={"preset": "bogus"}))
    assert not isinstance(raised.value, EncoderUnavailable)
    assert raised.value.code is ErrorCode.encode_failed

"""``genworker generate --image``: a bad image file is refused with the API's code before any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from genworker.cli import app
from tests.image_samples import bomb_png


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"not an image", "invalid_image"), (bomb_png(), "image_too_large"), (None, "invalid_image")],
    ids=["text", "bomb", "missing"],
)
def test_bad_image_files_exit_2_with_their_code(tmp_path: Path, content: bytes | None, code: str) -> None:
    path = tmp_path / "in.png"
    if content is not None:
        path.write_bytes(content)
    args = ["generate", "--model", "tiny-ltx2", "--prompt", "x", "--image", str(path), "-o", str(tmp_path / "o.mp4")]
    result = CliRunner().invoke(app, args, env={"GENWORKER_DATA_DIR": str(tmp_path / "var")})
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"{code}: ") and "(param --image)" in result.stderr
    assert not (tmp_path / "o.mp4").exists() and not (tmp_path / "var").exists()  # nothing written

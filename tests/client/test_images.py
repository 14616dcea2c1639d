"""``--image`` / ``image=``: a local file goes inline as a data URI, a URL as ``image_url``; the mode follows."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from genworker.cli import app
from genworker_client.images import image_input, mode_for
from tests.client.conftest import Server
from tests.image_samples import image_bytes

# In the catalog with an image_to_video mode and hosted by no embedded worker: the generation stays queued.
I2V_NEVER_RUNS = "wan2.1-i2v-14b-480p"


@pytest.mark.parametrize(
    ("fmt", "content_type"), [("JPEG", "image/jpeg"), ("PNG", "image/png"), ("WEBP", "image/webp")]
)
def test_a_file_becomes_a_data_uri_of_its_sniffed_type(tmp_path: Path, fmt: str, content_type: str) -> None:
    data = image_bytes(fmt=fmt)
    path = tmp_path / "picture.bin"  # the name says nothing; the bytes do
    path.write_bytes(data)
    fields = image_input(path)
    assert fields == {"image": f"data:{content_type};base64,{base64.b64encode(data).decode()}"}
    assert image_input(str(path)) == fields


def test_urls_and_data_uris_pass_as_they_are() -> None:
    assert image_input("https://example.com/a.png") == {"image_url": "https://example.com/a.png"}
    assert image_input("data:image/png;base64,AAAA") == {"image": "data:image/png;base64,AAAA"}
    assert (mode_for(None, "x.png"), mode_for(None, None), mode_for("text_to_video", "x")) == (
        "image_to_video",
        "text_to_video",
        "text_to_video",
    )


def test_what_is_no_image_file_is_a_value_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a JPEG, PNG or WebP"):
        image_input(tmp_path / "a.txt")
    with pytest.raises(ValueError, match="cannot read"):
        image_input(tmp_path / "missing.png")


def test_cli_create_with_an_image_file(server: Server, tmp_path: Path) -> None:
    data = image_bytes(160, 90, "JPEG")
    (tmp_path / "in.jpg").write_bytes(data)
    env = {"GENWORKER_BASE_URL": server.base_url, "GENWORKER_API_KEY": server.api_key}
    runner = CliRunner()
    args = ["client", "create", "--model", I2V_NEVER_RUNS, "--prompt", "the boat sails", "--ratio", "auto"]
    result = runner.invoke(app, [*args, "--image", str(tmp_path / "in.jpg")], env=env)
    assert result.exit_code == 0, result.stderr
    generation = json.loads(result.stdout)["generation"]
    assert generation["mode"] == "image_to_video" and generation["parameters"]["ratio"] == "16:9"
    image = generation["input"]["image"]
    assert (image["sha256"], image["width"], image["height"]) == (hashlib.sha256(data).hexdigest(), 160, 90)
    assert runner.invoke(app, ["client", "cancel", generation["id"]], env=env).exit_code == 0

    missing = runner.invoke(app, [*args, "--image", str(tmp_path / "missing.jpg")], env=env)
    assert missing.exit_code == 1
    assert json.loads(missing.stderr)["error"]["code"] == "invalid_argument"

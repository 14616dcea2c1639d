"""``genworker pipeline new``: its output for a pipeline class no catalog entry serves (CogVideoXPipeline) passes
its own generated tests once the recipe is filled in, and nothing else is edited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foundation.core.catalog import Catalog, load_catalog
from foundation.core.errors import CatalogError
from genworker.cli import app
from genworker.errors import ScaffoldError
from genworker.scaffold import RECIPE_PLACEHOLDER, write_scaffold

ROOT = Path(__file__).resolve().parents[2]
THIRD = "CogVideoXPipeline"


def test_the_scaffold_for_an_unserved_class_passes_its_generated_tests(catalog: Catalog, tmp_path: Path) -> None:
    assert all(spec.diffusers is None or spec.diffusers.pipeline != THIRD for spec in catalog.models.values())
    result = CliRunner().invoke(
        app, ["pipeline", "new", "cogvideox", "--from-diffusers", THIRD, "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    folder = tmp_path / "cogvideox"
    assert sorted(p.name for p in folder.iterdir()) == ["catalog.yaml", "test_cogvideox.py", "tiny_cogvideox.py"]
    entry = folder / "catalog.yaml"
    with pytest.raises(CatalogError):  # the recipe is the contributor's to fill in: unusable until then
        load_catalog(entry)
    # The recipe (CogVideoX-5b: guidance 6.0; 49 = 8k+1 frames), and nothing else.
    text = entry.read_text(encoding="utf-8")
    text = text.replace(f"guidance_scale: {RECIPE_PLACEHOLDER}", "guidance_scale: 6.0")
    text = text.replace(f"multiple: {RECIPE_PLACEHOLDER}", "multiple: 8")
    entry.write_text(text, encoding="utf-8")
    assert load_catalog(entry).models["tiny-cogvideox"].diffusers is not None
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", str(folder / "test_cogvideox.py"), "-q", "-p", "no:cacheprovider"),
            *("-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT)),
        ],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "3 passed" in run.stdout


@pytest.mark.parametrize(
    ("name", "pipeline", "message"),
    [
        ("cogvideox", "NoSuchPipeline", "no pipeline class 'NoSuchPipeline'"),
        ("Bad_Name", THIRD, "lowercase letters"),
        ("mochi", "MochiPipeline", "no shrunk config for"),
    ],
)
def test_the_scaffold_refuses_what_it_cannot_start(name: str, pipeline: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(ScaffoldError, match=message):
        write_scaffold(name, pipeline, tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_scaffold_never_overwrites(tmp_path: Path) -> None:
    write_scaffold("cogvideox", THIRD, tmp_path)
    result = CliRunner().invoke(
        app, ["pipeline", "new", "cogvideox", "--from-diffusers", THIRD, "--out", str(tmp_path)]
    )
    assert result.exit_code == 2 and "refusing to overwrite" in result.output

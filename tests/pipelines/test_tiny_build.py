"""Tiny model builds: deterministic weights, complete-build markers, skip and force, the CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pipelines.tiny.builders import BUILDER_VERSION, MARKER, TINY_MODELS, build_all, is_built


def _digests(root: Path) -> dict[str, str]:
    """Every weight file of the tiny models under ``root`` (only theirs: other tests write beside them, e.g. the
    LoRA of tests/pipelines/test_lora_dropped_keys.py, and may do so while this test runs)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for name in TINY_MODELS
        for path in sorted((root / name).rglob("*.safetensors"))
    }


def test_same_builder_same_weights(tiny_models_dir: Path, tmp_path: Path) -> None:
    paths = build_all(tmp_path)
    assert set(paths) == set(TINY_MODELS)
    first, second = _digests(tiny_models_dir), _digests(tmp_path)
    assert len(first) >= 10  # every component of every model
    assert first == second
    for name in TINY_MODELS:
        assert is_built(tmp_path / name)
        marker = json.loads((tmp_path / name / MARKER).read_text())
        assert marker == {"name": name, "builder_version": BUILDER_VERSION}
    assert not list(tmp_path.glob(".*.building-*"))  # no staging leftovers


def test_complete_builds_are_skipped_stale_or_forced_ones_rebuilt(tmp_path: Path) -> None:
    build_all(tmp_path)
    weights = tmp_path / "tiny-chat-llm" / "model.safetensors"
    inode = weights.stat().st_ino
    build_all(tmp_path)
    assert weights.stat().st_ino == inode  # skipped
    marker = tmp_path / "tiny-chat-llm" / MARKER
    marker.write_text(json.dumps({"name": "tiny-chat-llm", "builder_version": BUILDER_VERSION - 1}))
    wan_weights = tmp_path / "tiny-wan" / "transformer" / "diffusion_pytorch_model.safetensors"
    wan_inode = wan_weights.stat().st_ino
    build_all(tmp_path)
    assert weights.stat().st_ino != inode  # stale version rebuilt
    assert wan_weights.stat().st_ino == wan_inode  # the others kept
    build_all(tmp_path, force=True)
    assert wan_weights.stat().st_ino != wan_inode


def test_a_half_written_dir_is_not_complete(tmp_path: Path) -> None:
    (tmp_path / "tiny-wan").mkdir()
    assert not is_built(tmp_path / "tiny-wan")
    (tmp_path / "tiny-wan" / MARKER).write_text("{not json")
    assert not is_built(tmp_path / "tiny-wan")


def test_cli_reports_the_models(tiny_models_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scripts.make_tiny_models import main

    assert main(["--out", str(tiny_models_dir)]) == 0
    out = capsys.readouterr().out
    for name in TINY_MODELS:
        assert f"{name}: {tiny_models_dir / name}" in out

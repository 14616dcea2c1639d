"""`make gpu-smoke` in its CPU form: every family's real architecture at reduced depth and width runs a
bf16 forward through the script's code path, and the table carries the plan's figures beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import gpu_smoke


def test_the_dry_run_runs_each_family_in_bfloat16(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "smoke.json"
    results = gpu_smoke.main(["--dry-run", "--model", "wan2.2-t2v-a14b", "--model", "ltx-2", "--json", str(out)])
    assert [r.model for r in results] == ["wan2.2-t2v-a14b", "ltx-2"]
    for r in results:
        assert r.layers == 1 and r.real_layers in (40, 48)
        assert r.step_s > 0 and r.step_s_full_depth == pytest.approx(r.step_s * r.real_layers, rel=0.01)
        assert r.plan_activation_gb >= 0 and r.decode_gb is None  # no VAE in the dry run
    table = capsys.readouterr().out
    assert "| ltx-2 | offload model, VAE tiling | 64x64x9 | 1/48 |" in table
    assert json.loads(out.read_text())[0]["model"] == "wan2.2-t2v-a14b"


def test_without_a_gpu_the_real_run_says_so() -> None:
    with pytest.raises(SystemExit, match="no CUDA device"):
        gpu_smoke.main(["--model", "ltx-2"])

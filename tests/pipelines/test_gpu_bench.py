"""``scripts/bench_gpu.py --dry-run`` (no GPU here): the plan and the computed floors a GPU run is measured
against (the run itself needs CUDA and weights: ``make bench-gpu``)."""

from __future__ import annotations

import pytest

from scripts.bench_gpu import main


def test_the_dry_run_computes_the_floors_of_each_variant(capsys: pytest.CaptureFixture[str]) -> None:
    results = main(["--dry-run", "--models", "wan2.1-t2v-1.3b", "ltx-2"])
    wan = results["plan"]["wan2.1-t2v-1.3b"]
    assert wan["standard"]["pflops_per_step"] == pytest.approx(0.566, rel=0.01)  # docs/gpu.md, 832x480x81
    assert wan["standard"]["floor_s_h100"] == pytest.approx(28.6, abs=0.5)
    assert wan["fast"]["floor_s_h100"] == pytest.approx(wan["standard"]["floor_s_h100"] / 2, rel=0.01)
    assert set(results["plan"]["ltx-2"].values()) == {"counted when run"}  # its inputs are its pipeline's own
    assert '"dry_run": true' in capsys.readouterr().out


def test_without_cuda_the_run_says_to_use_the_dry_run() -> None:
    with pytest.raises(SystemExit):
        main(["--models", "wan2.1-t2v-1.3b"])

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


# ------------------------------------------------------------------------------------------ --random-weights

import json  # noqa: E402
import shlex  # noqa: E402
from pathlib import Path  # noqa: E402

from scripts import bench_gpu_random, device_bundle  # noqa: E402


def _device_bench_args(out_dir: Path) -> list[str]:
    """The bench arguments of the exact command ``make device-bundle`` prints, ``$OUT`` made ``out_dir``."""
    command = device_bundle.device_command("0123456789ab")
    tail = command.split("scripts/bench_gpu.py", 1)[1].split("2>&1", 1)[0]
    return [arg.replace("$OUT", str(out_dir)) for arg in shlex.split(tail)]


def test_the_device_command_runs_on_cpu_as_its_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The device run's whole path at tiny widths: every job built from configs/arch through its production
    adapter, each stage timed, JSON written, every backend tried (the ones that do not run here say why)."""
    results = main([*_device_bench_args(tmp_path), "--dry-run"])
    written = json.loads((tmp_path / "gpu.json").read_text())
    assert written["finished"] and written["dry_run"] and written["deadline_s"] == 420
    assert results["dropped"] == [] == written["dropped"]
    assert [j["job"] for j in written["jobs"]] == [
        "wan2.1-t2v-14b standard",
        "wan2.1-t2v-14b distilled",
        "wan2.2-t2v-a14b standard",
        "ltx-2 standard",
        "hunyuanvideo-1.5-480p standard",
    ]
    for job in written["jobs"]:
        assert job["text_encode_s"] > 0 and job["decode_s"] > 0 and job["e2e_s"] > 0
        assert job["frames_decoded"] == int(job["size"].split("x")[2])
    standard, distilled, wan22, ltx2, _ = written["jobs"]
    assert len(standard["step_s"]) == 4 and standard["groups"]["denoise"]["steps_timed"] == 3
    assert standard["groups"]["denoise"]["recipe_steps"] == 50 and standard["target_steps"] == 40
    assert standard["plan_peak_gb"] > 28  # the plan is the full-size model's, whatever the dry run built
    assert distilled["e2e_measured"] and len(distilled["step_s"]) == 4 and not distilled["cfg"]
    assert set(wan22["groups"]) == {"transformer", "transformer_2"}  # both experts ran
    assert sum(g["recipe_steps"] for g in wan22["groups"].values()) == 40
    assert ltx2["groups"]["stage 2"]["recipe_steps"] == 3 and ltx2["groups"]["stage 1"]["recipe_steps"] == 40
    for model, rows in written["backends"].items():
        variants = {r["variant"]: r for r in rows}
        assert variants["SDPA math"]["max_abs_diff"] < 1e-3, model  # the math kernel: the same numbers
        assert "error" in variants["flash-attn-4"] and "error" in variants["fp8 compute (torchao)"]
        assert variants["fp8 storage"]["max_abs_diff"] > 0
    assert [t["met"] for t in written["targets"]] == [None, None, None, None]  # not judged on a CPU
    assert "| wan2.1-t2v-14b standard (CFG) | 64x64x5 |" in capsys.readouterr().out


def test_a_run_cut_by_its_deadline_keeps_what_it_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checks = iter(range(100))

    def check(self: bench_gpu_random.Deadline) -> None:
        if next(checks) == 2:  # at the end of the 3rd step: the warm-up and two timed steps are done
            raise bench_gpu_random.DeadlineReached("deadline reached (test)")

    monkeypatch.setattr(bench_gpu_random.Deadline, "check", check)
    out = tmp_path / "gpu.json"
    main(["--random-weights", "--dry-run", "--jobs", "wan2.1-14b", "--no-backends", "--out", str(out)])
    written = json.loads(out.read_text())
    (entry,) = written["jobs"]
    assert entry["cut"] and entry["decode_s"] is None and len(entry["step_s"]) == 3
    assert entry["groups"]["denoise"]["steps_timed"] == 2  # the steps past the warm-up still give s/step
    assert written["dropped"] == [{"what": "wan2.1-14b", "why": "cut: deadline reached (test)"}]
    assert written["finished"]


def test_the_device_command_fits_one_device_call() -> None:
    command = device_bundle.device_command()
    assert len(command) < 2000 and "\n" not in command
    assert "--target /tmp/site .whl/*.whl" in command and "--deadline-s 420" in command
    if device_bundle.WHEELS.is_dir():  # built by `make device-bundle` (needs the package registry)
        assert device_bundle.bundle_mib() < device_bundle.BUDGET_MIB
        names = [w.name.split("-")[0].lower() for w in device_bundle.WHEELS.glob("*.whl")]
        assert len(names) == len(set(names))  # one version of each: two stop the install there

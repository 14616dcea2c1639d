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
    adapter, in the order the scarce minutes go (most proven first), each with its budget, each stage timed, JSON
    written; the backends compared on Wan 2.1 only; LTX-2's image_to_video run; no component's dtype moved."""
    results = main([*_device_bench_args(tmp_path), "--dry-run"])
    written = json.loads((tmp_path / "gpu.json").read_text())
    assert written["finished"] and written["dry_run"] and written["deadline_s"] == 420
    assert results["dropped"] == [] == written["dropped"]
    plan = written["plan"]["jobs"]
    assert [j["key"] for j in plan] == ["wan2.1-14b", "ltx-2", "hunyuan1.5-480p", "wan2.2-a14b"]
    assert [j["size"] for j in (plan[0], plan[3])] == ["832x480x81", "832x480x81"]  # Wan 2.2 A14B at 480p
    assert all(j["budget_s"] > 0 and j["budget_given_s"] > 0 and j["used_s"] > 0 for j in plan)
    assert sum(j["budget_s"] for j in plan) == pytest.approx(420, abs=0.5)  # the deadline, shared out
    assert [j["backends"] for j in plan] == [True, False, False, False]
    assert [j["offload"] for j in plan] == ["none"] * 4  # planned for an H200: every job resident
    assert [j["job"] for j in written["jobs"]] == [
        "wan2.1-t2v-14b standard",
        "wan2.1-t2v-14b distilled",
        "ltx-2 standard",
        "ltx-2 standard image_to_video",
        "hunyuanvideo-1.5-480p standard",
        "wan2.2-t2v-a14b standard",
    ]
    for job in written["jobs"]:
        assert job["text_encode_s"] > 0 and job["decode_s"] > 0 and job["e2e_s"] > 0
        assert job["frames_decoded"] == int(job["size"].split("x")[2])
        assert job["dtype_changes"] == {}, job["job"]
    assert written["failures"] == []
    standard, distilled, ltx2, ltx2_image, _, wan22 = written["jobs"]
    assert len(standard["step_s"]) == 4 and standard["groups"]["denoise"]["steps_timed"] == 3
    assert standard["groups"]["denoise"]["recipe_steps"] == 50 and standard["target_steps"] == 40
    assert standard["plan_peak_gb"] > 28  # the plan is the full-size model's, whatever the dry run built
    assert distilled["e2e_measured"] and len(distilled["step_s"]) == 4 and not distilled["cfg"]
    assert set(wan22["groups"]) == {"transformer", "transformer_2"}  # both experts ran
    assert sum(g["recipe_steps"] for g in wan22["groups"].values()) == 40
    assert ltx2["groups"]["stage 2"]["recipe_steps"] == 3 and ltx2["groups"]["stage 1"]["recipe_steps"] == 40
    assert ltx2_image["e2e_measured"] and ltx2_image["steps_run"] == 2 + 3  # 2 stage-1 steps, the refinement
    assert set(ltx2_image["groups"]) == {"stage 1", "stage 2"}
    assert set(written["backends"]) == {"wan2.1-t2v-14b"}  # compared on one job only
    variants = {r["variant"]: r for r in written["backends"]["wan2.1-t2v-14b"]}
    assert variants["SDPA math"]["max_abs_diff"] < 1e-3  # the math kernel: the same numbers
    assert "error" in variants["flash-attn-4"] and "error" in variants["fp8 compute (torchao)"]
    assert variants["fp8 storage"]["max_abs_diff"] > 0
    processors = written["builds"]["hunyuanvideo-1.5-480p"]["attention_processors"]["transformer"]
    assert "KeyPaddingAttnProcessor" in processors and "HunyuanVideo15AttnProcessor2_0" not in processors
    assert [t["met"] for t in written["targets"]] == [None, None, None, None]  # not judged on a CPU
    out = capsys.readouterr().out
    assert "| 1 | wan2.1-14b (wan2.1-t2v-14b) | 832x480x81 | none (" in out  # the plan, printed first
    assert "| wan2.1-t2v-14b standard (CFG) | 64x64x5 |" in out


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


# ------------------------------------------------------------------------------------------ the plan, pure


def _plans() -> list[bench_gpu_random.JobPlan]:
    from foundation.core.catalog import load_catalog

    return bench_gpu_random.plan_jobs(load_catalog(), list(bench_gpu_random.JOBS), "cpu", backends=True)


def test_each_job_gets_its_share_of_the_time_left_and_an_early_finish_hands_the_rest_on() -> None:
    plans = _plans()
    total = sum(p.estimate_s for p in plans)
    assert bench_gpu_random.budget(420.0, plans) == pytest.approx(420.0 * plans[0].estimate_s / total)
    # The first job used half its budget: the next job's share of what is left is larger than its planned one.
    left = 420.0 - bench_gpu_random.budget(420.0, plans) / 2
    assert bench_gpu_random.budget(left, plans[1:]) > 420.0 * plans[1].estimate_s / total
    assert bench_gpu_random.budget(-5.0, plans[3:]) == 0.0  # past the deadline: nothing
    # At the stated MFU the whole run is estimated within the device command's deadline.
    assert 300 < total < 450
    assert list(plans[0].phases)[-1] == "backends" and all("backends" not in p.phases for p in plans[1:])


def test_an_estimate_is_scaled_to_the_first_measured_run() -> None:
    estimate = bench_gpu_random.Estimate(forward_s=2.0, refine_s=0.0, other_s=15.0, build_s=20.0)
    assert estimate.run(4, 2) == 4 * 2 * 2.0 + 15.0
    # 4 CFG steps planned at 16 s ran in 32 s (+ 1 s of text encode in the first interval), decode 3 s.
    entry = {"step_s": [9.0, 8.0, 8.0, 8.0], "text_encode_s": 1.0, "decode_s": 3.0}
    measured = estimate.measured(entry, 4, 2)
    assert measured.forward_s == pytest.approx(4.0) and measured.other_s == pytest.approx(4.0)
    cut = estimate.measured({**entry, "decode_s": None}, 4, 2)
    assert cut.other_s == 15.0  # no decode measured: the assumed figure stays


def test_offload_follows_the_memory_plan_of_the_device() -> None:
    from foundation.core.catalog import load_catalog
    from pipelines.planning.memory_plan import GPU_CLASSES

    catalog = load_catalog()
    a14b = next(j for j in bench_gpu_random.JOBS if j.model == "wan2.2-t2v-a14b")
    job = bench_gpu_random._job(catalog, a14b, "standard", dry_run=False)
    spec = catalog.models[a14b.model]
    offload, peaks, usable = bench_gpu_random.choose_offload(spec, job, GPU_CLASSES["h200-141gb"])
    assert offload == "none" and peaks["none"] <= usable
    offload, peaks, usable = bench_gpu_random.choose_offload(spec, job, GPU_CLASSES["l40s-48gb"])
    assert offload == "model" and peaks["none"] > usable  # both experts and UMT5 do not fit 48 GB resident


def test_a_component_whose_dtype_moves_is_reported() -> None:
    import torch

    from scripts.bench_gpu_stages import component_dtypes, dtype_changes

    class Pipe:
        def __init__(self) -> None:
            self.components = {"transformer": torch.nn.Linear(4, 4).to(torch.bfloat16), "tokenizer": object()}

    class Adapter:
        pipe = Pipe()

    before = component_dtypes(Adapter())
    assert before == {"transformer": {"bfloat16": 20}}
    Adapter.pipe.components["transformer"].to(torch.float32)  # what a bare from_pipe did to LTX-2's modules
    assert dtype_changes(before, component_dtypes(Adapter())) == {"transformer": "bfloat16 20 -> float32 20"}


def test_hunyuanvideo_runs_on_its_production_attention_processors_in_the_random_bench() -> None:
    """The catalog entry's processor (``diffusers.attention_processor``) in place of diffusers' own, as the
    production load puts it: the dense L x L mask of the stock one is what the random bench must not time."""
    from foundation.core.catalog import load_catalog
    from pipelines.families.hunyuan15 import KeyPaddingAttnProcessor
    from scripts.random_pipelines import random_adapter

    spec = load_catalog().models["hunyuanvideo-1.5-480p"]
    assert spec.diffusers is not None
    assert spec.diffusers.attention_processor == "pipelines.families.hunyuan15:KeyPaddingAttnProcessor"
    rm = random_adapter(spec, device="cpu", variants=[("text_to_video", "standard")], scale="tiny", offload="none")
    processors = rm.adapter.pipe.transformer.attn_processors.values()
    joint = [p for p in processors if isinstance(p, KeyPaddingAttnProcessor.replaces)]
    assert joint and all(isinstance(p, KeyPaddingAttnProcessor) for p in joint)


def test_no_phase_starts_without_its_estimate_fitting_the_budget() -> None:
    from scripts.bench_gpu_report import Results

    run_deadline = bench_gpu_random.Deadline(100.0)
    job_deadline = run_deadline.within(1000.0)
    assert job_deadline.end == run_deadline.end  # a budget never reaches past the run's deadline
    estimate = bench_gpu_random.Estimate(forward_s=5.0, refine_s=0.0, other_s=10.0, build_s=20.0)
    ctx = {"dry_run": False, "deadline": run_deadline.within(45.0), "estimate": estimate}
    wan = bench_gpu_random.JOBS[0]  # 1 warm-up + 3 timed, CFG: 10 s a step, 10 s of decode
    assert bench_gpu_random._timed_steps(ctx, wan, branches=2) == 2  # 30 s of steps + 10 s fit 45 s; 40 + 10 do not
    results = Results(None, {})
    assert bench_gpu_random._fits(ctx, "wan2.1-t2v-14b distilled", 44.0, results)
    assert not bench_gpu_random._fits(ctx, "wan2.1-t2v-14b distilled", 60.0, results)
    (dropped,) = results.data["dropped"]
    assert dropped["what"] == "wan2.1-t2v-14b distilled" and "needs ~60" in dropped["why"]
    ctx["deadline"] = run_deadline.within(15.0)
    assert bench_gpu_random._timed_steps(ctx, wan, branches=2) == 0  # not even the warm-up and one step

"""``genworker generate``: one video in one process, no queue or store, the same resolve/encode path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from foundation.settings import settings_env
from tests.integration.worker_harness import ROOT, write_test_catalog
from tests.integration.worker_media import assert_playable_mp4


def run_generate(
    args: list[str], tiny_models_dir: Path, tmp_path: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **settings_env({"models": {"tiny_models_dir": str(tiny_models_dir)}, "data_dir": str(tmp_path / "var")}),
        **(extra or {}),
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, "-m", "genworker.cli", "generate", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_generate_writes_a_playable_mp4_and_poster(tiny_models_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "clip.mp4"
    args = ["--model", "tiny-ltx2", "--prompt", "waves on a shore", "--resolution", "144p", "--ratio", "9:16"]
    args += ["--duration", "1", "--audio", "--seed", "3", "-o", str(out)]
    proc = run_generate(args, tiny_models_dir, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["seed"] == 3 and summary["model"] == "tiny-ltx2"
    assert summary["video"] == str(out) and Path(summary["poster"]).is_file()
    assert_playable_mp4(out.read_bytes(), width=144, height=256, frames=8, duration_s=1.0, audio_channels=2)
    # The progress bar (stderr) ends on the last stage with every denoising step counted (4 steps).
    assert "done" in proc.stderr and "4/4" in proc.stderr


def test_generate_rejects_bad_input_with_its_code_and_exit_2(tiny_models_dir: Path, tmp_path: Path) -> None:
    args = ["--model", "tiny-wan", "--prompt", "x", "--resolution", "1080p", "-o", str(tmp_path / "x.mp4")]
    proc = run_generate(args, tiny_models_dir, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("invalid_parameter: resolution '1080p'")
    assert not (tmp_path / "x.mp4").exists()


def test_generate_jobs_reports_a_failed_job_on_its_line_and_runs_the_rest(
    tiny_models_dir: Path, tmp_path: Path
) -> None:
    """One process, two jobs: a pipeline that raises fails its job alone, with the code a worker would record;
    the next job still runs. Exit 1 since one failed."""
    catalog = write_test_catalog(tmp_path / "catalog.yaml")
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"model": "faulty-raise", "prompt": "x", "seed": 1}, {"model": "tiny-wan", "prompt": "x", "duration": 1}]
    jobs.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    env = settings_env({"catalog_path": str(catalog)})
    proc = run_generate(["--jobs", str(jobs), "--out-dir", str(tmp_path / "out")], tiny_models_dir, tmp_path, env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    first, second = (json.loads(line) for line in proc.stdout.strip().splitlines())
    assert first == {"job": 1, "error": {"code": "pipeline_error", "message": first["error"]["message"]}}
    assert first["error"]["message"].startswith("ValueError: synthetic pipeline failure")
    assert second["job"] == 2 and second["video"] == str(tmp_path / "out" / "2.mp4")
    assert_playable_mp4(
        (tmp_path / "out" / "2.mp4").read_bytes(), width=256, height=144, frames=4, duration_s=1.0, audio_channels=None
    )

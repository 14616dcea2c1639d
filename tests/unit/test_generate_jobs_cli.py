"""``genworker generate --jobs``: every line is checked before any model loads; a refused one stops the batch
with its code and the job's number, exit 2. (tests/install runs a whole batch in the production install.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from genworker.cli import app


def _run(tmp_path: Path, jobs: list[object] | None, *extra: str) -> tuple[int, str]:
    args = ["generate", *extra]
    if jobs is not None:
        path = tmp_path / "jobs.jsonl"
        path.write_text("".join((j if isinstance(j, str) else json.dumps(j)) + "\n" for j in jobs), encoding="utf-8")
        args += ["--jobs", str(path), "--out-dir", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args, env={"GENWORKER_DATA_DIR": str(tmp_path / "var")})
    return result.exit_code, result.stderr


GOOD = {"model": "tiny-wan", "prompt": "a fox"}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"model": "tiny-wan", "prompt": "x", "steps": 3}, "job 2: steps: Extra inputs are not permitted"),
        ({"model": "tiny-wan"}, "job 2: prompt: Field required"),
        ("not json", "job 2: Invalid JSON"),
        ({**GOOD, "resolution": "1080p"}, "job 2: resolution '1080p'"),
        ({**GOOD, "image": "missing.png"}, "job 2: cannot read missing.png"),
    ],
    ids=["unknown-option", "no-prompt", "not-json", "unsupported-size", "missing-image"],
)
def test_a_refused_line_stops_the_batch_before_anything_runs(tmp_path: Path, bad: object, message: str) -> None:
    code, stderr = _run(tmp_path, [GOOD, bad])
    assert code == 2, stderr
    assert message in stderr, stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "var").exists()  # nothing loaded or written


def test_jobs_takes_no_per_job_option(tmp_path: Path) -> None:
    code, stderr = _run(tmp_path, [GOOD], "--seed", "3")
    assert code == 2 and "drop --seed" in stderr


def test_one_job_still_needs_a_model_and_a_prompt(tmp_path: Path) -> None:
    code, stderr = _run(tmp_path, None, "--model", "tiny-wan")
    assert code == 2 and "missing option: --model and --prompt" in stderr

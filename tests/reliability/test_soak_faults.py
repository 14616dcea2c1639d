"""The fault soak, short: ``scripts/soak.py --faults`` with every fault kind injected at least once.

A real fleet (3 ``genworker worker`` + 2 ``genworker api`` processes) on a Sentinel deployment and a
restartable SeaweedFS, 120 jobs of the test-only ``instant-wan`` model, one fault every 5 s: a worker
``kill -9``, a Redis stall, a failover and a store restart each come in the first round. The script
itself checks the invariants (0 lost, 0 duplicated, 0 left running, 0 missing or orphaned objects,
every 202 accounted for) and exits non-zero otherwise; this test also reads its report. The long run
(``make soak``: 1,000 jobs; the 10,000-job figures in ``docs/reliability.md``) is the same script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.soak_faults import FAULTS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def run_soak(cmd: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the soak to its end; if the test is stopped first (its time limit, Ctrl-C), SIGTERM it and wait.

    ``subprocess.run`` would SIGKILL the script alone on the way out, and its Redis group, SeaweedFS and
    fleet would outlive the suite; on SIGTERM the script stops each of them by PID (``scripts/soak.py``).
    """
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=540)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    return proc.returncode, stderr


def test_fault_soak_loses_nothing(tmp_path: Path, tiny_models_dir: Path) -> None:
    out = tmp_path / "soak.json"
    cmd = [sys.executable, "scripts/soak.py", "--faults", "--jobs", "120", "--clients", "8"]
    cmd += ["--fault-interval-s", "5", "--time-limit-s", "240", "--drain-s", "90"]
    cmd += ["--models-dir", str(tiny_models_dir), "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path)}
    returncode, stderr = run_soak(cmd, env)
    assert out.exists(), stderr[-3000:]
    report = json.loads(out.read_text())
    assert returncode == 0, (report, stderr[-3000:])
    assert report["jobs_accepted"] == 120
    assert set(report["fault_counts"]) == set(FAULTS), report["fault_schedule"]
    for name in ("jobs_lost", "jobs_left_running", "duplicated_terminal_records", "unaccounted_202"):
        assert report[name] == 0, (name, report)
    assert report["succeeded_missing_artifacts"] == 0 and report["orphaned_objects"] == 0, report
    assert report["status_counts"].get("failed", 0) == 0, report["error_counts"]

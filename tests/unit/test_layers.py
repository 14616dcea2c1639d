"""The import contract (``[tool.importlinter]`` in pyproject.toml) holds, and it can fail.

The second test copies the packages, adds one wrong-way import and checks the contract breaks naming it:
a contract that never fails would guard nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# import name -> its source folder (the client is its own distribution, in a src layout under client/).
PACKAGES = {
    "foundation": "foundation",
    "genworker": "genworker",
    "worker": "worker",
    "pipelines": "pipelines",
    "api": "api",
    "genworker_client": "client/src/genworker_client",
}
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}  # the copy shadows the editable install
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(cwd / "pyproject.toml")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy_tree(dest: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for name, source in PACKAGES.items():
        shutil.copytree(ROOT / source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))


def test_layers_contract_is_kept() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_wrong_way_import_breaks_the_contract(tmp_path: Path) -> None:
    _copy_tree(tmp_path)
    sizes = tmp_path / "foundation" / "core" / "sizes.py"
    sizes.write_text(sizes.read_text() + "\nfrom worker import verdict  # noqa: E402, F401\n")
    client = tmp_path / "genworker_client" / "cadence.py"
    client.write_text(client.read_text() + "\nimport foundation.core.errors  # noqa: E402, F401\n")

    result = _lint(tmp_path)

    assert result.returncode != 0
    assert "foundation.core.sizes -> worker.verdict" in result.stdout
    assert "genworker_client.cadence -> foundation.core.errors" in result.stdout
    assert "4 broken" in result.stdout

"""The folders are the layers: the import contracts (``[tool.importlinter]`` in pyproject.toml, one per layer)
hold, each one can fail, and no two modules of ours import each other, directly or around a circle.

The second test copies the packages, adds one wrong-way import per layer and checks that each layer's
contract breaks naming it: a contract that never fails would guard nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

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
# One wrong-way import per layer: (file, the line added, the contract it breaks, the import it names).
WRONG_WAY = [
    (
        "foundation/core/sizes.py",
        "from worker import verdict",
        "core (foundation/core)",
        "foundation.core.sizes -> worker.verdict",
    ),
    (
        "foundation/stores/base.py",
        "from foundation.settings import Settings",
        "backends (foundation/queue, stores, media)",
        "foundation.stores.base -> foundation.settings",
    ),
    (
        "foundation/media/frames.py",
        "from foundation.queue import keys",
        "the backends do not import each other",
        "foundation.media.frames -> foundation.queue.keys",
    ),
    (
        "foundation/queue/sqlite/clock.py",
        "from foundation.queue.redis import entries",
        "the queue's Redis and SQLite backends",
        "foundation.queue.sqlite.clock -> foundation.queue.redis.entries",
    ),
    (
        "foundation/settings/models.py",
        "from pipelines import errors",
        "settings (foundation/settings)",
        "foundation.settings.models -> pipelines.errors",
    ),
    (
        "pipelines/runtime/flops.py",
        "from worker import metrics",
        "models (pipelines/)",
        "pipelines.runtime.flops -> worker.metrics",
    ),
    (
        "pipelines/runtime/resume.py",
        "from pipelines.families import wan",
        "inside pipelines/",
        "pipelines.runtime.resume -> pipelines.families.wan",
    ),
    ("worker/metrics.py", "from api import views", "daemon (worker/)", "worker.metrics -> api.views"),
    ("api/views.py", "from pipelines import errors", "http (api/)", "api.views -> pipelines.errors"),
    (
        "client/src/genworker_client/cadence.py",
        "import foundation.core.errors",
        "client (genworker_client)",
        "genworker_client.cadence -> foundation.core.errors",
    ),
]


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    # The copy shadows the editable install; a wide "terminal" keeps each contract's line whole.
    env = {**os.environ, "PYTHONPATH": str(cwd), "COLUMNS": "200"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(cwd / "pyproject.toml")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _copy_tree(dest: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for name, source in PACKAGES.items():
        shutil.copytree(ROOT / source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))


def _in_copy(path: str) -> str:
    return path.removeprefix("client/src/")


def test_each_layers_contract_is_kept() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    kept = [line for line in result.stdout.splitlines() if line.endswith(" KEPT")]
    for _, _, contract, _ in WRONG_WAY:
        assert any(line.startswith(contract) for line in kept), f"no kept contract {contract!r}:\n{result.stdout}"
    assert "0 broken" in result.stdout


def test_a_wrong_way_import_breaks_its_layers_contract(tmp_path: Path) -> None:
    _copy_tree(tmp_path)
    for path, line, _, _ in WRONG_WAY:
        module = tmp_path / _in_copy(path)
        module.write_text(module.read_text() + f"\n{line}  # noqa: E402, F401\n")

    result = _lint(tmp_path)

    assert result.returncode != 0
    broken = {line.removesuffix(" BROKEN") for line in result.stdout.splitlines() if line.endswith(" BROKEN")}
    for _, _, contract, named in WRONG_WAY:
        assert any(name.startswith(contract) for name in broken), f"{contract!r} not broken:\n{result.stdout}"
        assert named in result.stdout


def test_no_module_imports_another_around_a_circle() -> None:
    """Strongly connected parts of the import graph (function-level imports included), one per circle."""
    graph = grimp.build_graph(*(name for name in PACKAGES if name != "genworker_client"))
    assert _circles(graph) == []


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            part = []
            while (top := stack.pop()) != module:
                on_stack.discard(top)
                part.append(top)
            on_stack.discard(module)
            if part:
                circles.append(sorted([module, *part]))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles

"""No module of ours imports a dependency's private module. ``make lint`` refuses most forms (ruff's
PLC2701: ``from redis._parsers import ...``, ``from redis import _parsers``, ``import redis._parsers as
p``); the plain ``import redis._parsers`` is the one form it lets through, so this test looks for it,
and for the other forms too, in every source file."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["foundation", "api", "worker", "pipelines", "genworker", "scripts", "client/src", "tests"]
OURS = {"foundation", "api", "worker", "pipelines", "genworker", "genworker_client", "scripts", "tests"}


def _private(dotted: str) -> bool:
    """A dependency's module path with a private part after its top level (``redis._parsers.base``)."""
    top, *rest = dotted.split(".")
    return top not in OURS and any(part.startswith("_") and not part.startswith("__") for part in rest)


def private_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _private(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            found += [name for name in [node.module, *names] if _private(name)][:1]
    return found


def test_the_check_sees_every_form() -> None:
    for line in (
        "import redis._parsers",
        "import redis._parsers.base as base",
        "from redis import _parsers",
        "from redis._parsers.base import BaseParser",
    ):
        assert len(private_imports(line)) == 1, line
    assert private_imports("import redis.asyncio\nfrom foundation.queue import _x\nfrom . import _y") == []


def test_no_source_file_imports_a_private_module_of_a_dependency() -> None:
    # torch has no public count of compiled graphs, nor a public recompile limit (torch.compiler.config lacks it)
    allowed = {
        "pipelines/runtime/compile.py": ["torch._dynamo.utils", "torch._dynamo.config"],
        # torch's fake tensors and dispatch modes (the full-size simulation) have no public alias in torch 2.13;
        # they are what torch's own docs show for running a model without its memory.
        "pipelines/planning/fake_runtime.py": ["torch._subclasses.fake_tensor"],
        "pipelines/planning/op_stats.py": ["torch.utils._python_dispatch"],
    }
    offenders = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found = [
                name for name in private_imports(path.read_text(encoding="utf-8")) if name not in allowed.get(rel, [])
            ]
            if found:
                offenders[rel] = found
    assert offenders == {}

"""One tree of errors: every exception class of ours subclasses ``GenworkerError``, lives in its layer's
``errors`` module, and that module's docstring draws it; a drawn name that is no class of the module (or
of ``foundation.core.errors``, whose bases the trees show) is a stale drawing.

The second test plants a package with an exception class outside any tree and checks the walk names it:
a check that never fails would guard nothing.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from foundation.core.errors import GenworkerError

PACKAGES = ("foundation", "pipelines", "worker", "api", "genworker")
# The layer's errors modules: each package's own, and the backends' one each (they are siblings).
ERRORS_MODULES = frozenset(
    {
        "foundation.core.errors",
        "foundation.queue.errors",
        "foundation.stores.errors",
        "foundation.media.errors",
        "pipelines.errors",
        "worker.errors",
        "api.errors",
        "genworker.errors",
    }
)
# A tree's root line ("    GenworkerError") and its branches ("├── Name", "└── Name").
_DRAWN = re.compile(r"^    (\w+)$|[├└]── (\w+)", re.MULTILINE)


def _modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if not info.name.endswith(".__main__"):  # importing it runs the command
            found.append(importlib.import_module(info.name))
    return found


def _exceptions(module: ModuleType) -> list[type[BaseException]]:
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__ and issubclass(cls, BaseException)
    ]


def _drawn(module: ModuleType) -> set[str]:
    return {root or branch for root, branch in _DRAWN.findall(module.__doc__ or "")}


def tree_violations(packages: tuple[str, ...], errors_modules: frozenset[str]) -> list[str]:
    """Every way the exception classes of ``packages`` and the trees drawn in ``errors_modules`` disagree."""
    problems: list[str] = []
    core = importlib.import_module("foundation.core.errors")
    core_names = {cls.__name__ for cls in _exceptions(core)}
    for package in packages:
        for module in _modules(package):
            classes = _exceptions(module)
            if module.__name__ in errors_modules:
                own = {cls.__name__ for cls in classes}
                for name in sorted(_drawn(module) - own - core_names):
                    problems.append(f"{module.__name__}: the tree draws {name}, which is no exception class")
                for name in sorted(own - _drawn(module)):
                    problems.append(f"{module.__name__}.{name}: not drawn in its module's tree")
            for cls in classes:
                where = f"{module.__name__}.{cls.__name__}"
                if not issubclass(cls, GenworkerError):
                    problems.append(f"{where}: does not subclass GenworkerError")
                if module.__name__ not in errors_modules:
                    problems.append(f"{where}: an exception outside its layer's errors module")
    return problems


def test_every_exception_is_in_its_layers_tree() -> None:
    assert tree_violations(PACKAGES, ERRORS_MODULES) == []


def test_a_class_outside_the_tree_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratchlayer"
    scratch.mkdir()
    (scratch / "__init__.py").write_text("")
    (scratch / "errors.py").write_text(
        '"""Exception tree::\n\n    GenworkerError\n    ├── Drawn\n    └── Gone\n"""\n'
        "from foundation.core.errors import GenworkerError\n\n\n"
        "class Drawn(GenworkerError):\n    pass\n\n\n"
        "class Undrawn(GenworkerError):\n    pass\n"
    )
    (scratch / "parts.py").write_text("class Loose(ValueError):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "scratchlayer", raising=False)

    problems = tree_violations(("scratchlayer",), frozenset({"scratchlayer.errors"}))

    assert problems == [
        "scratchlayer.errors: the tree draws Gone, which is no exception class",
        "scratchlayer.errors.Undrawn: not drawn in its module's tree",
        "scratchlayer.parts.Loose: does not subclass GenworkerError",
        "scratchlayer.parts.Loose: an exception outside its layer's errors module",
    ]

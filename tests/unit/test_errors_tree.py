"""The exception tree keeps its shape: errors grouped by what their callers catch, control flow outside them.

- Every exception class of ours lives in its layer's ``errors`` module, is drawn in that module's docstring, and is
  drawn under the parent it really has; a drawn name that is no class of the module (or of
  ``foundation.core.errors``, whose branches the trees show) is a stale drawing.
- Every one is a ``GenworkerError`` or a ``Signal``, never both; every signal is listed in ``SIGNALS`` with the
  place that catches it.
- The root's direct children are the ones ``DIRECT_CHILDREN`` lists, each with the reason it hangs there: a new
  error goes under a branch, or into that table with its reason, where a reviewer reads it.
- The classes callers catch by their branch stay in it (``BRANCHES``), and no class sits under two branches (the
  worker's verdict and the API's handlers would each pick one of them).

The scratch-layer test plants a package that breaks each rule and checks the walk names every break: a check that
never fails would guard nothing.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from api.errors import OutboundRefused, ServerStopped
from foundation.core.errors import (
    ConfigError,
    GenworkerError,
    JobError,
    NotFound,
    RequestError,
    Signal,
    StoredDataError,
    TransientError,
    WorkerError,
)
from genworker.errors import FleetStopped
from pipelines.errors import CheckpointError, CheckpointMismatch, FollowerStopped, WarmupDone
from pipelines.runtime.resume import DenoiseCheckpoint, DenoiseSession
from worker.errors import JobInterrupted, StaleClaim

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

# Every class straight under ``GenworkerError``, and why it hangs there rather than under a branch.
DIRECT_CHILDREN: dict[str, str] = {
    "RequestError": "branch: a caller's input refused before any work (4xx, a usage error), never retried",
    "NotFound": "branch: no such thing where the caller looked (404, 'no such ...')",
    "JobError": "branch: the job fails for good with its code (the verdict's 'failed')",
    "TransientError": "branch: retried with backoff (the verdict's 'retry', the API's 503)",
    "WorkerError": "branch: this worker is at fault, the job goes back unfailed ('release_local', 'fatal')",
    "ConfigError": "branch: settings, keys or arguments that cannot be used: a command exits, a server won't start",
    "StoredDataError": "branch: stored data this version will not use: the reader sets it aside and goes on",
    "ApiError": "the HTTP tier's branch: the answer a route chose, caught only by the API's handler",
    "IllegalTransition": "a guard against a bug: nothing handles it, it must end as a 500 or a pipeline_error",
    "PromptExtendError": "caught only inside prompt extension, which falls back to the original prompt",
}

# Branch -> classes that must stay under it (at any depth): what callers catch by branch.
BRANCHES: dict[type[GenworkerError], frozenset[str]] = {
    RequestError: frozenset(
        {
            "RequestRejected",
            "IdempotencyConflict",
            "InvalidProject",
            "ProjectQueueFull",
            "BodyTooLarge",
            "RangeNotSatisfiable",
            "InvalidKey",
            "OutboundRefused",
            "FetchFailed",
            "FetchTooLarge",
        }
    ),
    OutboundRefused: frozenset({"UrlNotAllowed", "UrlRefused"}),
    NotFound: frozenset({"UnknownJob", "UnknownEndpoint", "UnknownDelivery"}),
    JobError: frozenset({"JobCanceled", "ModelLoadError"}),
    TransientError: frozenset({"BackendUnavailable", "NotDurable"}),
    WorkerError: frozenset({"FatalWorkerError", "WorkerFault", "EncoderUnavailable", "WorkDiskFull"}),
    ConfigError: frozenset(
        {"CatalogError", "ParallelSetupError", "SealingError", "WebhookKeyMissing", "FleetError", "ScaffoldError"}
    ),
    StoredDataError: frozenset({"UnreadableRecord", "NewerRecord", "UnreadableEntry", "CompileCacheRefused"}),
    CheckpointError: frozenset({"CheckpointCorrupt", "CheckpointMismatch", "UnsupportedState"}),
}

# Every control-flow signal, and the one place that waits for it.
SIGNALS: dict[type[Signal], str] = {
    StaleClaim: "worker.verdict: the attempt is abandoned (another attempt owns the job)",
    JobInterrupted: "worker.verdict: the job is released for re-delivery",
    FollowerStopped: "pipelines.runtime.context_parallel.follow: the follower waits for the next order",
    WarmupDone: "pipelines.runtime.compile.run_warmup_job: the warm-up's denoise ends early",
    ServerStopped: "api.server.serve: uvicorn has shut down, serve returns",
    FleetStopped: "genworker.fleet.run_fleet: the fleet stops in order",
}

# A line of a drawn tree: a root ("    GenworkerError   text") or a branch ("    │   ├── Name   text"). A
# continuation line (a prefix of "│   " and spaces, then text) has neither marker nor a name at column 4.
_NODE = re.compile(r"^    (?P<prefix>(?:│   |    )*)(?P<marker>[├└]── )?(?P<name>\w+)")


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


def _literal_blocks(doc: str) -> list[list[str]]:
    """The reStructuredText literal blocks of ``doc``: the indented lines after a line ending in ``::``."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in doc.splitlines():
        if current is not None and line.strip() and not line.startswith("    "):
            current = None
        if current is not None:
            current.append(line)
        elif line.rstrip().endswith("::"):
            current = []
            blocks.append(current)
    return blocks


def drawn_edges(doc: str) -> list[tuple[str, str | None]]:
    """(name, the name drawn as its parent, or None for a root) for every node of the trees ``doc`` draws."""
    edges: list[tuple[str, str | None]] = []
    for block in _literal_blocks(doc):
        path: list[str] = []  # the names on the way from the root to the line above
        for line in block:
            node = _NODE.match(line)
            if node is None or (node["prefix"] and not node["marker"]):
                continue
            depth = len(node["prefix"]) // 4 + (1 if node["marker"] else 0)
            del path[depth:]
            edges.append((node["name"], path[-1] if path else None))
            path.append(node["name"])
    return edges


def _class_problems(cls: type[BaseException], where: str, allowed_direct: dict[str, str]) -> list[str]:
    problems: list[str] = []
    is_error, is_signal = issubclass(cls, GenworkerError), issubclass(cls, Signal)
    if is_error and is_signal:
        problems.append(f"{where}: both a GenworkerError and a Signal: an error handler would swallow the signal")
    elif not is_error and not is_signal:
        problems.append(f"{where}: neither a GenworkerError nor a Signal")
    if GenworkerError in cls.__bases__ and cls.__name__ not in allowed_direct:
        problems.append(f"{where}: directly under GenworkerError without a reason in DIRECT_CHILDREN")
    branches = sorted(b.__name__ for b in cls.__mro__ if GenworkerError in b.__bases__)
    if len(branches) > 1:
        problems.append(f"{where}: under two branches, {' and '.join(branches)}")
    if is_signal and cls is not Signal and cls not in SIGNALS:
        problems.append(f"{where}: a Signal not listed in SIGNALS with the place that catches it")
    return problems


def _drawing_problems(module: ModuleType, classes: list[type[BaseException]], known: dict[str, type]) -> list[str]:
    problems: list[str] = []
    edges = drawn_edges(module.__doc__ or "")
    drawn = {name for name, _ in edges}
    own = {cls.__name__ for cls in classes}
    for name in sorted(drawn - own - known.keys()):
        problems.append(f"{module.__name__}: the tree draws {name}, which is no exception class")
    for name in sorted(own - drawn):
        problems.append(f"{module.__name__}.{name}: not drawn in its module's tree")
    for name, parent in edges:
        cls = next((c for c in classes if c.__name__ == name), None) or known.get(name)
        if cls is None or parent is None:
            continue
        bases = [base.__name__ for base in cls.__bases__]
        if parent not in bases:
            problems.append(f"{module.__name__}: {name} drawn under {parent}, but its parents are {bases}")
    return problems


def tree_violations(
    packages: tuple[str, ...], errors_modules: frozenset[str], allowed_direct: dict[str, str] = DIRECT_CHILDREN
) -> list[str]:
    """Every way the exception classes of ``packages`` break the tree's shape or disagree with the trees drawn
    in ``errors_modules``."""
    problems: list[str] = []
    core = importlib.import_module("foundation.core.errors")
    known: dict[str, type] = {cls.__name__: cls for cls in _exceptions(core)}
    for package in packages:
        for module in _modules(package):
            classes = _exceptions(module)
            if module.__name__ in errors_modules:
                problems += _drawing_problems(module, classes, known)
            for cls in classes:
                where = f"{module.__name__}.{cls.__name__}"
                problems += _class_problems(cls, where, allowed_direct)
                if module.__name__ not in errors_modules:
                    problems.append(f"{where}: an exception outside its layer's errors module")
    return problems


@functools.cache
def _ours() -> dict[str, type[BaseException]]:
    return {cls.__name__: cls for package in PACKAGES for module in _modules(package) for cls in _exceptions(module)}


def test_every_exception_is_in_its_layers_tree_in_its_place() -> None:
    assert tree_violations(PACKAGES, ERRORS_MODULES) == []


def test_the_root_has_exactly_the_children_its_table_gives_reasons_for() -> None:
    direct = {name for name, cls in _ours().items() if GenworkerError in cls.__bases__}
    assert direct == DIRECT_CHILDREN.keys()
    assert all(reason.strip() for reason in DIRECT_CHILDREN.values())


def test_what_callers_catch_by_branch_stays_in_that_branch() -> None:
    ours = _ours()
    missing = {name for names in BRANCHES.values() for name in names} - ours.keys()
    assert missing == set()
    misplaced = [
        f"{name} is not under {branch.__name__}"
        for branch, names in BRANCHES.items()
        for name in sorted(names)
        if not issubclass(ours[name], branch)
    ]
    assert misplaced == []


def test_no_signal_is_an_error() -> None:
    assert {cls for cls in _ours().values() if issubclass(cls, Signal) and cls is not Signal} == SIGNALS.keys()
    assert [cls.__name__ for cls in SIGNALS if issubclass(cls, GenworkerError)] == []


class _OneCheckpoint:
    """``pipelines.runtime.resume.Checkpoints`` that hands out one checkpoint and records what became of it."""

    def __init__(self, checkpoint: DenoiseCheckpoint) -> None:
        self._checkpoint = checkpoint
        self.refusals: list[str] = []

    def load(self) -> DenoiseCheckpoint | None:
        return self._checkpoint

    def refused(self, reason: str) -> None:
        self.refusals.append(reason)

    def discard(self, detail: str) -> None:
        raise AssertionError(f"discard is the worker's answer to CheckpointMismatch, not called here: {detail}")

    def resumed(self, step: int, total: int) -> None:
        pass

    def due(self, step: int, total: int) -> bool:
        return False

    def save(self, checkpoint: DenoiseCheckpoint) -> None:
        pass


def _resuming_session() -> DenoiseSession:
    stored = DenoiseCheckpoint(fingerprint="", step=2, total=4, samples=[], schedulers=[])
    checkpoints = _OneCheckpoint(stored)
    session = DenoiseSession(lambda done, total: None, total=4, checkpoints=checkpoints)
    assert session.resume_step == 2 and checkpoints.refusals == []  # restoring, nothing confirmed yet
    return session


@pytest.mark.parametrize("signal", list(SIGNALS), ids=lambda cls: cls.__name__)
def test_a_signal_leaves_a_checkpoint_restore_as_itself(signal: type[Signal]) -> None:
    """A restore turns a failure into ``CheckpointMismatch`` (the checkpoint is deleted and the job starts over),
    but passes ours through: a drain's ``JobInterrupted`` or a ``StaleClaim`` raised from the step callback while
    replaying must reach the verdict as itself, now that signals are no ``GenworkerError``."""
    with pytest.raises(signal), _resuming_session().restoring():
        raise signal("stop")
    with pytest.raises(CheckpointMismatch), _resuming_session().restoring():
        raise RuntimeError("a tensor of another shape")  # the same place, a failure: the checkpoint's


_SCRATCH_ERRORS = '''"""Exception tree::

    GenworkerError
    ├── RequestError
    │   ├── Drawn
    │   └── Misdrawn
    ├── Loner
    ├── Both
    ├── Twice
    └── Gone

    Signal
    └── Halt
"""
from foundation.core.errors import GenworkerError, JobError, RequestError, Signal, TransientError


class Drawn(RequestError):
    pass


class Misdrawn(JobError):
    pass


class Loner(GenworkerError):
    pass


class Undrawn(RequestError):
    pass


class Both(GenworkerError, Signal):
    pass


class Twice(JobError, TransientError):
    pass


class Halt(Signal):
    pass
'''


def test_a_scratch_layer_that_breaks_each_rule_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratchlayer"
    scratch.mkdir()
    (scratch / "__init__.py").write_text("")
    (scratch / "errors.py").write_text(_SCRATCH_ERRORS)
    (scratch / "parts.py").write_text("class Loose(ValueError):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "scratchlayer", raising=False)

    problems = tree_violations(("scratchlayer",), frozenset({"scratchlayer.errors"}))

    assert problems == [
        "scratchlayer.errors: the tree draws Gone, which is no exception class",
        "scratchlayer.errors.Undrawn: not drawn in its module's tree",
        "scratchlayer.errors: Misdrawn drawn under RequestError, but its parents are ['JobError']",
        "scratchlayer.errors: Twice drawn under GenworkerError, but its parents are ['JobError', 'TransientError']",
        "scratchlayer.errors.Both: both a GenworkerError and a Signal: an error handler would swallow the signal",
        "scratchlayer.errors.Both: directly under GenworkerError without a reason in DIRECT_CHILDREN",
        "scratchlayer.errors.Both: a Signal not listed in SIGNALS with the place that catches it",
        "scratchlayer.errors.Halt: a Signal not listed in SIGNALS with the place that catches it",
        "scratchlayer.errors.Loner: directly under GenworkerError without a reason in DIRECT_CHILDREN",
        "scratchlayer.errors.Twice: under two branches, JobError and TransientError",
        "scratchlayer.parts.Loose: neither a GenworkerError nor a Signal",
        "scratchlayer.parts.Loose: an exception outside its layer's errors module",
    ]

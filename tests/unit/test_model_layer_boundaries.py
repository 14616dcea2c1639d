"""The model layer's two boundaries, read from the source so a new crossing fails here before it ships:

- the daemon never reaches into a model's diffusers pipeline: it reads what ``pipelines.runtime.adapter.Adapter``
  declares and what ``denoise`` returns (``Latents.stats``: FLOPs and graphs compiled), never ``adapter.pipe``;
- ``pipelines/`` stamps no private attributes of ours on diffusers modules: state that follows a module lives in
  tables keyed by it (``pipelines.runtime.profile``, ``pipelines.runtime.compile``) or on the adapter."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "worker"
PIPELINES = ROOT / "pipelines"
# The prefix our stamped attributes carried (``_genworker_cache``, ``_genworker_compiled_forwards``).
OUR_PREFIX = "_genworker"


def pipe_reads(source: str) -> list[int]:
    """Line numbers where ``source`` reads a ``pipe`` attribute: ``x.pipe`` or ``getattr(x, "pipe"...)``."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source)) if _reads_pipe(node))


def _reads_pipe(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "pipe"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"getattr", "hasattr"}
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value == "pipe"
    )


def test_no_module_of_the_worker_reads_an_adapters_pipeline() -> None:
    files = sorted(WORKER.rglob("*.py"))
    assert files
    found = {
        str(path.relative_to(ROOT)): lines for path in files if (lines := pipe_reads(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"worker/ reads adapter.pipe (read Latents.stats or the Adapter's own fields): {found}"


def test_the_check_finds_each_way_of_reading_it() -> None:
    """The check above can fail: each spelling the worker once used, or could, is found."""
    source = (
        "pipe = adapter.pipe\n"
        "flops.recording(adapter.pipe)\n"
        "getattr(adapter, 'pipe', None)\n"
        "hasattr(self._adapter, 'pipe')\n"
        "adapter.pipeline_class\n"  # another name: not a read of ``pipe``
    )
    assert pipe_reads(source) == [1, 2, 3, 4]


def stamped_attributes(source: str) -> list[str]:
    """Names of ours that ``source`` sets or reads as attributes: ``x._genworker_...``, or by name (``getattr``)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith(OUR_PREFIX):
            names.append(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(OUR_PREFIX):
            names.append(node.value)
    return sorted(names)


def test_the_model_layer_stamps_nothing_on_diffusers_modules() -> None:
    found = {
        str(path.relative_to(ROOT)): names
        for path in sorted(PIPELINES.rglob("*.py"))
        if (names := stamped_attributes(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"attributes of ours on diffusers modules (keep them in a WeakKeyDictionary): {found}"


def test_the_stamp_check_finds_what_the_model_layer_once_did() -> None:
    source = (
        "model._genworker_cache = wanted\n"
        "getattr(model, '_genworker_compiled_forwards', ())\n"
        "model.compiled_forwards\n"  # another name: not one of ours
    )
    assert stamped_attributes(source) == ["_genworker_cache", "_genworker_compiled_forwards"]

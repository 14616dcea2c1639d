"""docs/architecture.md names only files and folders that exist: a walk of one job through modules that
were moved or removed misleads the next reader, so the doc is held to the tree like code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# Backticked paths under the repository's own folders; the client's package lives under client/src/.
_PATH = re.compile(
    r"`((?:foundation|worker|pipelines|api|genworker|genworker_client|client|configs|scripts|tests|deploy|docs)/[\w./-]*)`"
)


def _on_disk(path: str) -> Path:
    if path.startswith("genworker_client/"):
        return ROOT / "client" / "src" / path
    return ROOT / path


def named_paths(text: str) -> list[str]:
    return sorted(set(_PATH.findall(text)))


def test_every_path_the_doc_names_exists() -> None:
    names = named_paths(DOC.read_text(encoding="utf-8"))
    assert len(names) > 40  # the walk and the layout are there to be checked
    missing = [name for name in names if not _on_disk(name).exists()]
    assert missing == []


def test_a_stale_path_is_found() -> None:
    text = "the job goes to `worker/daemon/loop.py` and `foundation/queue/base.py`"
    assert [name for name in named_paths(text) if not _on_disk(name).exists()] == ["worker/daemon/loop.py"]

"""Module docstrings say what and why, never a measured figure (issue 37): a time or a rate measured once drifts
from docs/benchmarks.md, where the figures live with their date, machine and method. A setting's value written
in a docstring is not a measurement: written out in words ("sleeps 10 milliseconds"), it is not what this looks
for; times in µs/ms and rates are."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["foundation", "worker", "api", "pipelines", "genworker", "scripts", "client/src/genworker_client"]
# A measured time (0.15 ms, ~30 µs, -0.05 ms) or rate (1,136 req/s, 785 jobs/s).
FIGURE = re.compile(r"\d\s*(?:µs|us|ms)\b|\d\s*(?:req|requests|jobs|cycles)/s\b")


def figures_in(source: str) -> list[str]:
    """The figures a module's docstring carries."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return [line.strip() for line in doc.splitlines() if FIGURE.search(line)]


def test_no_module_docstring_carries_a_measured_figure() -> None:
    found = {
        str(path.relative_to(ROOT)): hits
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (hits := figures_in(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "measured figures belong in docs/benchmarks.md"


@pytest.mark.parametrize(
    ("docstring", "flagged"),
    [
        ('"""The fast path saves ~30 µs per poll."""', True),
        ('"""Pick-up costs 0.15 ms of the daemon\'s time."""', True),
        ('"""The catalog serves 5,069 req/s."""', True),
        ('"""Parts of 8 MiB (the multipart minimum is 5 MiB)."""', False),
        ('"""Retries back off from 100 milliseconds."""', False),
    ],
)
def test_the_check_tells_a_figure_from_a_setting(docstring: str, flagged: bool) -> None:
    assert bool(figures_in(docstring)) is flagged

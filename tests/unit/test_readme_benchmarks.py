"""README's benchmark table shows the run that docs/benchmarks.md shows: the same run stamp, and every
value and baseline in the README table is a figure of that page's summary."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start : following if following != -1 else len(text)]


def test_readme_table_comes_from_the_run_in_docs_benchmarks() -> None:
    readme = _section((ROOT / "README.md").read_text(encoding="utf-8"), "## Benchmarks")
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    summary = _section(page, "## Summary")

    stamp = re.search(r"^- run: (\S+)T(\S+?)\+00:00 — `([^`]+)`, ([\d.]+) s in all", page, re.MULTILINE)
    assert stamp is not None
    day, time_of_day, command, seconds = stamp.groups()
    assert f"`{command}`, {day}T{time_of_day}Z, {seconds} s" in readme

    rows = [line for line in readme.splitlines() if line.startswith("| ") and not line.startswith("| figure")]
    assert len(rows) >= 8
    summary_numbers = set(re.findall(r"\d[\d,]*\.?\d*", summary))
    for row in rows:
        value, baseline = (cell.strip() for cell in row.strip("|").split("|")[1:3])
        for number in re.findall(r"\d[\d,]*\.?\d*", f"{value} {baseline}"):
            assert number in summary_numbers, (row, number)

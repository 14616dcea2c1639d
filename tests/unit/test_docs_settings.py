"""Every ``GENWORKER_*`` setting the docs tell a user to set is one the service loads: a value the settings
refuse (an allow-list entry without its port, say) stops the very command the page starts. Settings set
together on one line are loaded together."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from foundation.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_ASSIGNMENT = re.compile(r"\b(GENWORKER_[A-Z0-9_]+)=('[^']*'|\"[^\"]*\"|[^\s`'\"]+)")
# The client's variables (genworker_client), not the service's settings.
CLIENT_ONLY = {"GENWORKER_BASE_URL", "GENWORKER_API_KEY"}
# A value a reader fills in: gw_..., $KEY, "$(cat var/dev-api-key)", <path>.
_PLACEHOLDER = re.compile(r"\.\.\.|\$|<")
# A setting the docs never name without the one it needs (README: "with a project key"), filled in.
COMPANIONS = {"GENWORKER_API__PLAYGROUND": {"GENWORKER_API__PLAYGROUND_API_KEY": "gw_a-project-key"}}


def documented_settings() -> list[tuple[str, dict[str, str]]]:
    """(page:line, the settings that line sets), for every line of the docs that sets one."""
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            values = {
                name: shlex.split(raw)[0]
                for name, raw in _ASSIGNMENT.findall(line)
                if name not in CLIENT_ONLY and not _PLACEHOLDER.search(raw)
            }
            if values:
                found.append((f"{page.relative_to(ROOT)}:{number}", values))
    return found


def test_the_docs_set_settings() -> None:
    where = [place for place, _ in documented_settings()]
    assert sum(p.startswith("docs/quickstart.md") for p in where) >= 3, where  # its allow-lists among them


@pytest.mark.parametrize(("place", "values"), documented_settings(), ids=[p for p, _ in documented_settings()])
def test_each_documented_setting_loads(
    place: str, values: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in [n for n in os.environ if n.startswith("GENWORKER_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no ./genworker.yaml of the checkout's
    for name, value in values.items():
        monkeypatch.setenv(name, value)
        for companion, stand_in in COMPANIONS.get(name, {}).items():
            monkeypatch.setenv(companion, stand_in)
    load_settings()  # raises on a value the service would refuse at start

"""The committed JSON Schemas match the pydantic models (run `make schemas` after a contract change)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.export_schemas import SCHEMAS, render

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schemas"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schema_matches_model(name: str) -> None:
    committed = (SCHEMA_DIR / name).read_text(encoding="utf-8")
    assert committed == render(SCHEMAS[name]), f"docs/schemas/{name} is stale: run `make schemas`"

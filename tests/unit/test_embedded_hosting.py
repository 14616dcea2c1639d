"""``make up`` hosts every tiny model of the catalog, so each model the embedded API offers has a worker; an
operator's ``worker.hosted_models`` (environment or YAML) still wins, and the worker subprocess gets the same list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foundation.core.catalog import load_catalog
from genworker.embedded import EmbeddedPaths, embedded_settings, worker_env


def _settings(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    settings = embedded_settings(EmbeddedPaths(tmp_path), host="127.0.0.1", port=8000, models_dir=tmp_path / "m")
    return settings.worker.hosted_models, worker_env(settings)


def test_every_tiny_catalog_model_is_hosted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GENWORKER_WORKER__HOSTED_MODELS", raising=False)
    monkeypatch.delenv("GENWORKER_CONFIG", raising=False)
    hosted, env = _settings(tmp_path)
    tiny = [spec.id for spec in load_catalog().models.values() if spec.tiny]
    assert hosted == tiny and {"tiny-wan", "tiny-wan-ti2v", "tiny-hunyuan15", "tiny-skyreels-v2"} <= set(hosted)
    assert json.loads(env["GENWORKER_WORKER__HOSTED_MODELS"]) == hosted


def test_an_operator_choice_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENWORKER_WORKER__HOSTED_MODELS", '["tiny-ltx2"]')
    hosted, env = _settings(tmp_path)
    assert hosted == ["tiny-ltx2"] and json.loads(env["GENWORKER_WORKER__HOSTED_MODELS"]) == ["tiny-ltx2"]

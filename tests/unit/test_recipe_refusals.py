"""A recipe value the family would accept and then ignore is refused when the catalog loads (issue 18):
Wan's flow_shift and guidance_scale_2 on LTX-2, a distilled variant off its 8 steps or without the two-stage
recipe, a revision that is not a commit, a sampler (the Wan adapters' solver) on another family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from foundation.core.catalog import default_catalog_path, load_catalog
from foundation.core.errors import CatalogError
from pipelines.runtime.options import load_model_catalog


def _ltx2_catalog(tmp_path: Path, mutate: Any) -> Path:
    data = yaml.safe_load(default_catalog_path().read_text(encoding="utf-8"))
    entry = next(m for m in data["models"] if m["id"] == "ltx-2")
    mutate(entry)
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def _variants(entry: dict[str, Any]) -> dict[str, Any]:
    return entry["modes"]["text_to_video"]["variants"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: _variants(e)["standard"].update(flow_shift=3.0), "LTX-2 would ignore them"),
        (lambda e: _variants(e)["standard"].update(guidance_scale_2=3.0), "LTX-2 would ignore them"),
        (lambda e: _variants(e)["fast"].update(steps=6), "distilled runs exactly 8 steps"),
        (lambda e: e.pop("two_stage"), "distilled needs the model's two_stage"),
        (lambda e: _variants(e)["standard"]["pipeline_kwargs"].update(flow_shift=3.0), "unknown key 'flow_shift'"),
        (lambda e: e.update(revision="main"), "revision"),
        (lambda e: _variants(e)["fast"].update(sampler={"solver_order": 1}), "sampler rebuilds the Wan adapters'"),
    ],
)
def test_ignored_recipe_values_are_refused_at_load(tmp_path: Path, mutate: Any, message: str) -> None:
    with pytest.raises(CatalogError, match=message) as info:
        load_model_catalog(_ltx2_catalog(tmp_path, mutate))
    assert "model 'ltx-2'" in str(info.value)


def test_the_shipped_ltx2_entry_loads(tmp_path: Path) -> None:
    assert load_catalog(_ltx2_catalog(tmp_path, lambda e: None)).models["ltx-2"].two_stage is not None


def test_hunyuan15_says_it_runs_without_super_resolution_and_true_is_refused(tmp_path: Path) -> None:
    """Upstream HunyuanVideo 1.5 runs a super-resolution stage by default (generate.py --sr true); diffusers 0.42.1
    has no implementation of it, so the entries say false explicitly and true is refused at load."""
    data = yaml.safe_load(default_catalog_path().read_text(encoding="utf-8"))
    hunyuan = [m for m in data["models"] if m["id"].startswith("hunyuanvideo-1.5-")]
    assert hunyuan and all(m.get("super_resolution") is False for m in hunyuan)
    hunyuan[0]["super_resolution"] = True
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    with pytest.raises(CatalogError, match="super_resolution: no adapter runs a super-resolution stage"):
        load_catalog(path)

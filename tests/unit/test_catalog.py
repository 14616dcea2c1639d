"""Catalog loading: the shipped file is valid, and bad files fail naming file, entry and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from foundation.core.catalog import load_catalog
from foundation.core.errors import CatalogError
from pipelines.runtime.options import load_model_catalog

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "models.yaml"
REQUIRED_MODELS = {"wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "wan2.2-t2v-a14b", "ltx-2", "tiny-wan", "tiny-ltx2"}


def test_shipped_catalog_loads_with_required_models() -> None:
    catalog = load_catalog(SHIPPED)
    assert set(catalog.models) >= REQUIRED_MODELS
    for spec in catalog.models.values():
        assert set(spec.modes) <= {"text_to_video", "image_to_video"}, spec.id
        for mode in spec.modes.values():
            assert "standard" in mode.variants, spec.id


def test_tiny_models_cover_the_test_grid() -> None:
    catalog = load_catalog(SHIPPED)
    for model_id in ("tiny-wan", "tiny-ltx2"):
        spec = catalog.models[model_id]
        assert spec.tiny
        assert set(spec.resolutions) == {"144p", "240p"}
        assert set(spec.ratios) == {"16:9", "9:16", "1:1", "4:3", "3:4"}
        assert spec.durations == [1, 2, 3, 4, 5]
    assert not catalog.models["tiny-wan"].audio
    assert catalog.models["tiny-ltx2"].audio


def test_wan_has_no_audio_and_ltx2_does() -> None:
    catalog = load_catalog(SHIPPED)
    for spec in catalog.models.values():
        assert spec.audio == (spec.family == "ltx2")


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def _one_model() -> dict[str, Any]:
    raw = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    entry = next(m for m in raw["models"] if m["id"] == "tiny-wan")
    return {"models": [entry]}


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda m: m.update(fps=0), "fps"),
        (lambda m: m.update(fps="fast"), "fps"),
        (lambda m: m.update(family="sora"), "family"),
        (lambda m: m.update(adapter="not a path"), "adapter"),
        (lambda m: m["frame_rule"].update(multiple=0), "frame_rule.multiple"),
        (lambda m: m.update(unexpected=1), "unexpected"),
        (lambda m: m["rates"]["per_second"].update({"144p": "-1"}), "rates.per_second.144p"),
        (
            lambda m: m["modes"]["text_to_video"]["variants"]["standard"].update(steps=0),
            "modes.text_to_video.variants.standard.steps",
        ),
        (lambda m: m["prompt_extend"].pop("llm"), "prompt_extend"),
    ],
)
def test_bad_field_names_file_entry_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    data = _one_model()
    mutate(data["models"][0])
    path = _write(tmp_path, data)
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    message = str(info.value)
    assert str(path) in message
    assert "'tiny-wan'" in message
    assert f"'{field}'" in message


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda m: m.update(resolutions=["144p", "2160p"]), "2160p"),
        (lambda m: m.update(ratios=["16:9", "21:9"]), "21:9"),
        (lambda m: m["rates"]["per_second"].pop("240p"), "240p"),
        (lambda m: m["defaults"].update(audio=True), "audio"),
        (lambda m: m["defaults"].update(duration_seconds=9), "duration_seconds"),
        # A chat LLM gets the official prompts of a named upstream task, and reads text only.
        (lambda m: m["prompt_extend"].pop("system_prompt"), "needs 'system_prompt'"),
        (lambda m: m["prompt_extend"].update(system_prompt="wan2.3"), "system_prompt"),
        (lambda m: m["modes"].update(image_to_video=m["modes"]["text_to_video"]), "chat LLM reads text only"),
    ],
)
def test_inconsistent_entry_is_refused(tmp_path: Path, mutate: Any, fragment: str) -> None:
    data = _one_model()
    mutate(data["models"][0])
    with pytest.raises(CatalogError) as info:
        load_catalog(_write(tmp_path, data))
    assert fragment in str(info.value)
    assert "'tiny-wan'" in str(info.value)


def test_unknown_pipeline_option_names_file_model_variant_and_key(tmp_path: Path) -> None:
    data = _one_model()
    data["models"][0]["modes"]["text_to_video"]["variants"]["fast"]["pipeline_kwargs"] = {"boundary_ration": 0.9}
    path = _write(tmp_path, data)
    with pytest.raises(CatalogError) as info:
        load_model_catalog(path)
    message = str(info.value)
    assert str(path) in message
    assert "model 'tiny-wan'" in message
    assert "text_to_video.variants.fast.pipeline_kwargs" in message
    assert "unknown key 'boundary_ration' for family 'wan'" in message
    assert "did you mean 'boundary_ratio'?" in message


def test_pipeline_options_are_checked_per_family(tmp_path: Path) -> None:
    data = _one_model()
    variants = data["models"][0]["modes"]["text_to_video"]["variants"]
    variants["standard"]["pipeline_kwargs"] = {"stg_scale": 0.0}  # an LTX-2 option on a Wan model
    with pytest.raises(CatalogError, match="unknown key 'stg_scale' for family 'wan'"):
        load_model_catalog(_write(tmp_path, data))
    # The families' option names are the model layer's (pipelines.runtime.options): the core catalog, all the
    # API reads, checks structure only.
    assert load_catalog(_write(tmp_path, data)).models["tiny-wan"]
    variants["standard"]["pipeline_kwargs"] = {"boundary_ratio": 0.875, "max_sequence_length": 256}
    assert load_model_catalog(_write(tmp_path, data)).models["tiny-wan"].modes["text_to_video"].variants["standard"]


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    data = _one_model()
    data["models"].append(dict(data["models"][0]))
    with pytest.raises(CatalogError, match="duplicate"):
        load_catalog(_write(tmp_path, data))


def test_an_all_digit_revision_is_told_to_be_quoted(tmp_path: Path) -> None:
    """YAML reads an unquoted all-digit commit as a number; the error says to quote it, and quoted it loads."""
    digits = "1234567890" * 4
    data = _one_model()
    data["models"][0]["revision"] = "REVISION"
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(data).replace("REVISION", digits), encoding="utf-8")
    with pytest.raises(CatalogError, match=f"field 'revision'.*YAML read {digits} as a number: quote it"):
        load_catalog(path)
    path.write_text(yaml.safe_dump(data).replace("REVISION", f"'{digits}'"), encoding="utf-8")
    assert load_catalog(path).models["tiny-wan"].revision == digits


@pytest.mark.parametrize("content", ["models: 3", "[1, 2]", "models: [", "stray: 1\nmodels: []"])
def test_malformed_files_are_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert str(path) in str(info.value)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "nope.yaml")

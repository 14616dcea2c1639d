"""LoRA recipes (a variant's ``lora``: step-distillation LoRAs) on tiny Wan: the LoRA loads with the model, is
on only for its variant's jobs (switching back is exact), changes the output, and fused gives what it gives
unfused."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from foundation.core.catalog import Catalog, LoraSpec, VariantSpec
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.lora import lora_adapter_name
from pipelines.runtime.registry import load_adapter
from pipelines.tiny.parts import TINY_WAN_LORA
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of

SMALL = {"ratio": "1:1", "duration_seconds": 1}


def test_a_lora_variant_is_on_for_its_jobs_only_and_fuses(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob, model_cache: ModelCache
) -> None:
    base = catalog.models["tiny-wan"]
    lora = LoraSpec(weights="tiny-wan", weight_name=TINY_WAN_LORA)
    distilled = VariantSpec(steps=2, guidance_scale=1.0, flow_shift=3.0, rate_multiplier=Decimal("0.5"), lora=lora)
    t2v = base.modes["text_to_video"]
    spec = base.model_copy(
        update={
            "modes": {"text_to_video": t2v.model_copy(update={"variants": {**t2v.variants, "distilled": distilled}})}
        }
    )
    plain = frames_of(generate(model_cache.get(base), make_job("tiny-wan", variant="fast", **SMALL), StepLog()))
    standard = make_job("tiny-wan", variant="fast", **SMALL)  # the same schedule as `distilled`, without the LoRA
    with_lora = standard.model_copy(update={"variant": "distilled", "lora": lora})
    adapter = load_adapter(spec, tiny_runtime)
    try:
        pipe = adapter.pipe  # type: ignore[attr-defined]
        name = lora_adapter_name("text_to_video", "distilled")
        assert name in pipe.get_list_adapters()["transformer"]
        np.testing.assert_array_equal(frames_of(generate(adapter, standard, StepLog())), plain)  # loaded, off
        lora_frames = frames_of(generate(adapter, with_lora, StepLog()))
        assert np.abs(lora_frames.astype(int) - plain.astype(int)).mean() > 1.0  # the LoRA changes the video
        np.testing.assert_array_equal(frames_of(generate(adapter, standard, StepLog())), plain)  # off again, exact
        # Fused into the weights (what a pool serving only this variant may do), the LoRA gives the same video
        # (peft keeps a merged layer merged while its adapter is active, and unmerges it when switched off).
        pipe.set_adapters([name], [lora.scale])
        pipe.fuse_lora(adapter_names=[name], lora_scale=lora.scale)
        fused = frames_of(generate(adapter, with_lora, StepLog()))
        assert np.abs(fused.astype(int) - lora_frames.astype(int)).mean() < 0.05
        pipe.unfuse_lora()
        unfused = frames_of(generate(adapter, standard, StepLog()))
        assert np.abs(unfused.astype(int) - plain.astype(int)).mean() < 0.05
    finally:
        adapter.unload()


def test_the_shipped_lora_variant_is_a_few_step_recipe_priced_below_standard(catalog: Catalog) -> None:
    spec = catalog.models["wan2.1-t2v-14b"]
    variants = spec.modes["text_to_video"].variants
    distilled = variants["distilled"]
    assert distilled.lora is not None and distilled.lora.weight_name.endswith(".safetensors")
    assert distilled.steps <= 8 and distilled.guidance_scale == 1.0  # few steps, no CFG
    assert distilled.rate_multiplier < variants["fast"].rate_multiplier


def test_a_lora_that_does_not_load_leaves_the_model_serving_and_releases_its_jobs(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    from pipelines.errors import ModelLoadError

    base = catalog.models["tiny-wan"]
    missing = LoraSpec(weights="tiny-wan", weight_name="not-downloaded.safetensors")
    broken = VariantSpec(steps=2, guidance_scale=1.0, flow_shift=3.0, lora=missing)
    t2v = base.modes["text_to_video"]
    spec = base.model_copy(
        update={"modes": {"text_to_video": t2v.model_copy(update={"variants": {**t2v.variants, "distilled": broken}})}}
    )
    adapter = load_adapter(spec, tiny_runtime)  # the model loads; only the variant is lost
    try:
        standard = make_job("tiny-wan", variant="fast", **SMALL)
        assert frames_of(generate(adapter, standard, StepLog())).std() > 0
        with pytest.raises(ModelLoadError, match="LoRA of variant 'distilled' is not loaded"):
            adapter.denoise(standard.model_copy(update={"variant": "distilled", "lora": missing}), StepLog())
    finally:
        adapter.unload()


def test_variants_whose_lora_files_are_missing_here_are_named_without_loading(
    catalog: Catalog, tiny_runtime: ModelRuntimeSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a worker leaves out of its heartbeat: a local directory without the file, or a hub file absent
    from the hub cache while the hub is offline (a GPU node); a file in the cache is present."""
    from huggingface_hub import constants

    from foundation.settings import load_settings
    from pipelines.runtime.lora import variants_without_weights
    from worker.context import unserved_variants

    both = catalog.models["tiny-wan-i2v-a14b"]  # one LoRA file per expert, both built with the model
    assert variants_without_weights(both, tiny_runtime) == []
    i2v = both.modes["image_to_video"]
    lora = i2v.variants["distilled"].lora
    assert lora is not None
    half = i2v.variants["distilled"].model_copy(update={"lora": lora.model_copy(update={"weight_name_2": "gone.st"})})
    lacking = both.model_copy(
        update={"modes": {"image_to_video": i2v.model_copy(update={"variants": {**i2v.variants, "distilled": half}})}}
    )
    assert variants_without_weights(lacking, tiny_runtime) == ["image_to_video/distilled"]

    real = catalog.models["wan2.1-t2v-14b"]
    hub = ModelRuntimeSettings(device="cpu")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert variants_without_weights(real, hub) == []  # online: fetched when the model loads
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert variants_without_weights(real, hub) == ["text_to_video/distilled"]
    distilled = real.modes["text_to_video"].variants["distilled"].lora
    assert distilled is not None
    repo = tmp_path / f"models--{distilled.weights.replace('/', '--')}"  # the hub cache's layout
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40) / distilled.weight_name).write_bytes(b"weights")
    assert variants_without_weights(real, hub) == []

    settings = load_settings(None, models={"tiny_models_dir": tiny_runtime.tiny_models_dir})
    lacking_catalog = catalog.model_copy(update={"models": {**catalog.models, lacking.id: lacking}})
    hosted = ["tiny-wan", lacking.id]
    assert unserved_variants(settings, lacking_catalog, hosted) == {lacking.id: ["image_to_video/distilled"]}

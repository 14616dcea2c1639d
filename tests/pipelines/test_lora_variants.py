"""LoRA recipes (a variant's ``lora``: step-distillation LoRAs) on tiny Wan: the LoRA loads with the model, is
on only for its variant's jobs (switching back is exact), changes the output, and fused gives what it gives
unfused."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from pipelines.adapter import generate
from pipelines.cache import ModelCache
from pipelines.config import ModelRuntimeSettings
from pipelines.registry import load_adapter
from pipelines.runtime import lora_adapter_name
from pipelines.tiny import TINY_WAN_LORA
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of
from worker.core.catalog import Catalog, LoraSpec, VariantSpec

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
    from pipelines.registry import ModelLoadError

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

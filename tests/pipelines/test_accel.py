"""Acceleration recipes the cache and LoRA tests do not cover (tests/pipelines/test_cache_variants.py,
test_lora_variants.py): First Block Cache skips exactly the steps its rule says, and a two-expert model's
distillation LoRAs (one file per expert, ``lora.weight_name_2``) load into their own experts and run only in
their variant's jobs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from foundation.core.catalog import CacheSpec, Catalog
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.lora import lora_adapter_name
from pipelines.runtime.profile import apply_cache
from pipelines.tiny.parts import TINY_EXPERT_LORAS
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of
from tests.pipelines.i2v_support import fitted, i2v_job, psnr

SMALL = {"ratio": "1:1", "duration_seconds": 1}


def _head_residuals() -> Any:
    """A diffusers hook on the first block, registered below the cache's (so it sees the block's own output
    even when the cache then adds the cached residual of the others): each call's residual, output - input."""
    from diffusers.hooks import ModelHook

    class HeadResiduals(ModelHook):
        def __init__(self) -> None:
            super().__init__()
            self.residuals: list[Any] = []

        def new_forward(self, module: Any, *args: Any, **kwargs: Any) -> Any:
            output = self.fn_ref.original_forward(*args, **kwargs)
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            self.residuals.append((output - hidden).detach().clone())
            return output

    return HeadResiduals()


def _first_block_rule(residuals: list[Any], threshold: float) -> list[bool]:
    """Which calls run the remaining blocks, by First Block Cache's documented rule: the first call does; later
    ones do when the first block's residual moved by more than ``threshold`` (mean absolute change over mean
    absolute value) since the last call that ran them."""
    runs, last = [], None
    for residual in residuals:
        run = last is None or float((residual - last).abs().mean() / last.abs().mean()) > threshold
        runs.append(run)
        last = residual if run else last
    return runs


def test_first_block_cache_skips_the_steps_its_rule_says_and_stays_close(
    model_cache: ModelCache, catalog: Catalog, make_job: MakeJob
) -> None:
    from diffusers.hooks import HookRegistry

    adapter = model_cache.get(catalog.models["tiny-wan"])
    pipe = adapter.pipe  # type: ignore[attr-defined]
    # No CFG (the `fast` recipe): one transformer call per step, one cache state.
    job = make_job("tiny-wan", variant="fast", **SMALL).model_copy(update={"steps": 10})
    # No shipped entry caches with it (the `cached` variants run TaylorSeer); the recipe a catalog would write.
    cache = CacheSpec(kind="first_block", threshold=0.1)
    cached_job = job.model_copy(update={"cache": cache})
    head, tail = pipe.transformer.blocks[0], pipe.transformer.blocks[-1]
    tail_runs = [0]
    counter = tail.attn1.to_q.register_forward_hook(lambda *_: tail_runs.__setitem__(0, tail_runs[0] + 1))
    reference = frames_of(generate(adapter, job, StepLog()))  # also leaves the cache off before the hook goes in
    recorder = _head_residuals()
    HookRegistry.check_if_exists_or_initialize(head).register_hook(recorder, "genworker_test_head_residuals")
    try:
        assert tail_runs[0] == job.steps
        tail_runs[0] = 0
        cached = frames_of(generate(adapter, cached_job, StepLog()))
        computed = tail_runs[0]
    finally:
        apply_cache([pipe.transformer], None)  # the cache's hooks off first: ours is below them
        HookRegistry.check_if_exists_or_initialize(head).remove_hook("genworker_test_head_residuals")
        counter.remove()
    expected = _first_block_rule(recorder.residuals, cache.threshold)
    assert len(recorder.residuals) == job.steps  # the first block runs on every step
    assert computed == sum(expected), (computed, expected)
    assert 1 < computed < job.steps  # the rule both skipped and ran steps (measured: 5 of 10 run, 46 dB)
    # Close to the uncached video, and closer than another seed's (~31.6 dB on these near-mean tiny frames).
    other_seed = frames_of(generate(adapter, job.model_copy(update={"seed": job.seed + 1}), StepLog()))
    close, unrelated = psnr(cached, reference), psnr(other_seed, reference)
    assert close >= 35.0 and close > unrelated + 3.0, (close, unrelated)
    np.testing.assert_array_equal(frames_of(generate(adapter, job, StepLog())), reference)  # off again: exact


def _lora_a_calls(pipe: Any, adapter: str) -> tuple[dict[str, int], dict[str, int], list[Any]]:
    """Forward calls of each expert's LoRA ``A`` matrices for ``adapter`` (peft skips them while disabled), and
    how many LoRA layers each expert has."""
    calls = {"transformer": 0, "transformer_2": 0}
    layers = dict.fromkeys(calls, 0)
    handles = []
    for name in calls:
        for module in getattr(pipe, name).modules():
            lora_a = getattr(module, "lora_A", None)
            if lora_a is not None and adapter in lora_a:

                def count(*_: Any, expert: str = name) -> None:
                    calls[expert] += 1

                handles.append(lora_a[adapter].register_forward_hook(count))
                layers[name] += 1
    return calls, layers, handles


def test_a_two_expert_lora_loads_each_file_into_its_expert_and_runs_in_its_variant_only(
    model_cache: ModelCache, catalog: Catalog, tiny_runtime: ModelRuntimeSettings
) -> None:
    from pathlib import Path

    from safetensors.torch import load_file

    spec = catalog.models["tiny-wan-i2v-a14b"]
    adapter = model_cache.get(spec)
    pipe = adapter.pipe  # type: ignore[attr-defined]
    name = lora_adapter_name("image_to_video", "distilled")
    listed = pipe.get_list_adapters()
    assert name in listed["transformer"] and name in listed["transformer_2"]
    # Each expert holds its own file's matrices (the high-noise file in transformer, the low-noise one in _2).
    folder = Path(tiny_runtime.tiny_models_dir) / spec.weights
    for expert, weight_name in zip(("transformer", "transformer_2"), TINY_EXPERT_LORAS, strict=True):
        saved = load_file(str(folder / weight_name))["transformer.blocks.0.attn1.to_q.lora_A.weight"]
        loaded = getattr(pipe, expert).blocks[0].attn1.to_q.lora_A[name].weight
        assert np.array_equal(loaded.detach().numpy(), saved.numpy()), expert

    distilled = i2v_job(catalog, spec.id, variant="distilled")
    assert distilled.lora is not None and distilled.guidance_scale == 1.0
    plain = distilled.model_copy(update={"lora": None})  # the same schedule without the LoRA
    image = fitted(distilled, 1)
    calls, layers, handles = _lora_a_calls(pipe, name)
    try:
        without = frames_of(generate(adapter, plain, StepLog(), image=image))
        assert calls == {"transformer": 0, "transformer_2": 0}  # loaded, off
        with_lora = frames_of(generate(adapter, distilled, StepLog(), image=image))
        # Each expert's LoRA ran in each of its steps, no CFG: 2 of the 4 on each side of boundary 0.9 (timesteps
        # 999, 937 | 833, 625), as lightx2v splits its 4 steps.
        assert layers["transformer"] > 0 and calls == {expert: 2 * n for expert, n in layers.items()}, (calls, layers)
        calls.update(transformer=0, transformer_2=0)
        again = frames_of(generate(adapter, plain, StepLog(), image=image))
        assert calls == {"transformer": 0, "transformer_2": 0}
    finally:
        for handle in handles:
            handle.remove()
    assert np.abs(with_lora.astype(int) - without.astype(int)).mean() > 1.0  # the LoRAs change the video
    np.testing.assert_array_equal(again, without)  # switched back: exact


LORA_2 = {"weights": "x", "weight_name": "a.safetensors", "weight_name_2": "b.safetensors"}


@pytest.mark.parametrize(
    ("model", "variant", "message"),
    [
        ("tiny-wan", {"lora": LORA_2}, "weight_name_2 is the second expert's LoRA"),  # one expert
        ("tiny-ltx2", {"lora": {"weights": "x", "weight_name": "a.safetensors"}}, "Wan adapters only"),
    ],
)
def test_a_lora_the_model_would_ignore_is_refused_at_load(
    catalog: Catalog, model: str, variant: dict[str, Any], message: str
) -> None:
    from pydantic import ValidationError

    from foundation.core.catalog import ModelSpec

    data = catalog.models[model].model_dump(mode="json")
    data["modes"]["text_to_video"]["variants"]["distilled"] = {"steps": 4, "guidance_scale": 1.0, **variant}
    with pytest.raises(ValidationError, match=message):
        ModelSpec.model_validate(data)


def test_a_two_expert_lora_missing_one_file_is_not_loaded_at_all(
    catalog: Catalog, tiny_runtime: ModelRuntimeSettings
) -> None:
    from foundation.core.catalog import LoraSpec
    from pipelines.errors import ModelLoadError
    from pipelines.runtime.registry import load_adapter

    base = catalog.models["tiny-wan-i2v-a14b"]
    i2v = base.modes["image_to_video"]
    distilled = i2v.variants["distilled"]
    assert distilled.lora is not None
    half = distilled.model_copy(
        update={"lora": LoraSpec(**{**distilled.lora.model_dump(), "weight_name_2": "gone.safetensors"})}
    )
    spec = base.model_copy(
        update={"modes": {"image_to_video": i2v.model_copy(update={"variants": {**i2v.variants, "distilled": half}})}}
    )
    adapter = load_adapter(spec, tiny_runtime)  # the model loads; the variant is lost on both experts
    try:
        pipe = adapter.pipe  # type: ignore[attr-defined]
        assert all(not names for names in pipe.get_list_adapters().values()), pipe.get_list_adapters()
        job = i2v_job(catalog, base.id, variant="distilled")
        with pytest.raises(ModelLoadError, match="LoRA of variant 'distilled' is not loaded"):
            adapter.denoise(job, StepLog(), image=fitted(job, 1))  # type: ignore[call-arg]
        plain = job.model_copy(update={"lora": None})
        assert frames_of(generate(adapter, plain, StepLog(), image=fitted(job, 1))).std() > 0
    finally:
        adapter.unload()

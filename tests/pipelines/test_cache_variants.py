"""Cache-accelerated recipes (a variant's ``cache``, diffusers' own hooks via ``pipelines.runtime.profile.apply_cache``)
on tiny Wan: the attention modules run on exactly the steps the schedule says, the video stays close to the
uncached one, and the next uncached job on the same loaded model is bit-identical to a fresh uncached run."""

from __future__ import annotations

from typing import Any

import numpy as np

from foundation.core.catalog import CacheSpec, Catalog
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def _attention_calls(pipe: Any) -> tuple[list[int], list[Any]]:
    """Real computations of every block's self-attention (its query projection runs only when it computes)."""
    calls = [0]
    handles = [
        block.attn1.to_q.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        for block in pipe.transformer.blocks
    ]
    return calls, handles


def test_taylorseer_runs_attention_on_the_scheduled_steps_and_stays_close(
    model_cache: ModelCache, catalog: Catalog, make_job: MakeJob
) -> None:
    adapter = model_cache.get(catalog.models["tiny-wan"])
    pipe = adapter.pipe  # type: ignore[attr-defined]
    job = make_job("tiny-wan", ratio="1:1", duration_seconds=1).model_copy(update={"steps": 8})
    cached_job = job.model_copy(update={"cache": CacheSpec(kind="taylorseer", interval=3, warmup_steps=2)})
    blocks, contexts = len(pipe.transformer.blocks), 2  # CFG: conditional and unconditional contexts
    calls, handles = _attention_calls(pipe)
    try:
        reference = frames_of(generate(adapter, job, StepLog()))
        full = calls[0]
        calls[0] = 0
        cached = frames_of(generate(adapter, cached_job, StepLog()))
        partial = calls[0]
        calls[0] = 0
        again = frames_of(generate(adapter, job, StepLog()))  # the cache is off again for a standard job
    finally:
        for handle in handles:
            handle.remove()
    # Steps 0 and 1 (warm-up), then every 3rd: 3 and 6. 4 of 8 steps compute attention.
    computed = [s for s in range(8) if s < 2 or (s - 2 - 1) % 3 == 0]
    assert full == 8 * blocks * contexts
    assert partial == len(computed) * blocks * contexts == full // 2
    np.testing.assert_array_equal(again, reference)
    other_seed = frames_of(generate(adapter, job.model_copy(update={"seed": job.seed + 1}), StepLog()))
    # Close to the uncached video. Random tiny weights keep every frame near the VAE's mean colour, so even
    # another seed scores ~31.6 dB against the reference; the cached run must be closer than that and above
    # 30 dB (measured: 36.7 dB, i.e. 3.2x less squared error than the other seed's video).
    close, unrelated = _psnr(cached, reference), _psnr(other_seed, reference)
    assert close >= 30.0 and close > unrelated + 3.0, (close, unrelated)


def test_the_shipped_cache_variants_are_priced_below_their_standard_recipe(catalog: Catalog) -> None:
    variants = [
        (spec.id, name, variant)
        for spec in catalog.models.values()
        for mode in spec.modes.values()
        for name, variant in mode.variants.items()
        if variant.cache is not None
    ]
    assert {model for model, _, _ in variants} >= {"wan2.1-t2v-14b", "wan2.2-t2v-a14b"}
    for model, name, variant in variants:
        standard = catalog.models[model].modes["text_to_video"].variants["standard"]
        assert variant.rate_multiplier < standard.rate_multiplier, (model, name)
        assert variant.steps == standard.steps  # the same schedule, fewer attention evaluations

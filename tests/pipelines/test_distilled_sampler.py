"""The step-distilled recipes (lightx2v's 4-step LoRAs) sample as lightx2v does: a first-order flow-Euler step
(UniPC at solver order 1, its corrector off on every step) at the timesteps 999/937/833/625; every other Wan recipe
keeps the checkpoint's UniPC at order 2 with its corrector."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from foundation.core.catalog import Catalog, ModelSpec, SamplerSpec
from foundation.core.contract import CreateRequest
from foundation.core.resolve import ResolvedJob, resolve
from foundation.settings.models import ModelRuntimeSettings
from pipelines.families.wan import WanTextToVideo
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from tests.pipelines.helpers import StepLog
from tests.pipelines.i2v_support import fitted

# lightx2v's denoising_step_list [1000, 750, 500, 250] shifted by 5 gives 1000, 937.5, 833.33, 625 (ModelTC/LightX2V
# lightx2v/models/schedulers/wan/step_distill/scheduler.py); UniPC truncates its timesteps to integers.
LIGHTX2V_TIMESTEPS = [999, 937, 833, 625]
LIGHTX2V_SIGMAS = [1.0, 0.9375, 0.833333, 0.625]
EULER = SamplerSpec(solver_order=1, corrector=False)


def _shipped_unipc() -> Any:
    """The scheduler the Wan Diffusers checkpoints ship (the tiny Wan models copy it): UniPC, flow sigmas, order 2."""
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0, num_train_timesteps=1000
    )


def _wan_variants(catalog: Catalog) -> Iterator[tuple[ModelSpec, str, str]]:
    for spec in catalog.models.values():
        if spec.family == "wan":
            for mode_name, mode in spec.modes.items():
                for name in mode.variants:
                    yield spec, mode_name, name


def _job(catalog: Catalog, model: str, mode: str, variant: str) -> ResolvedJob:
    spec = catalog.models[model]
    request = CreateRequest.model_validate(
        {
            "model": model,
            "mode": mode,
            "variant": variant,
            "parameters": {"seed": 1, "ratio": "16:9", "duration_seconds": min(spec.durations)},
            "input": {"prompt": "a red fox running through snow"},
        }
    )
    return resolve(request, catalog)[0]


DISTILLED = [
    ("wan2.1-t2v-14b", "text_to_video"),
    ("wan2.2-t2v-a14b", "text_to_video"),
    ("wan2.1-i2v-14b-480p", "image_to_video"),
    ("wan2.2-i2v-a14b", "image_to_video"),
    ("tiny-wan", "text_to_video"),
    ("tiny-wan-a14b", "text_to_video"),
    ("tiny-wan-i2v", "image_to_video"),
    ("tiny-wan-i2v-a14b", "image_to_video"),
]


def test_every_distillation_lora_asks_for_the_first_order_euler_step(catalog: Catalog) -> None:
    """A variant with a step-distillation LoRA runs lightx2v's recipe: 4 steps, shift 5, no CFG, first order;
    no other Wan variant changes the checkpoint's solver."""
    distilled = set()
    for spec, mode, name in _wan_variants(catalog):
        variant = spec.modes[mode].variants[name]
        if variant.lora is None:
            assert variant.sampler is None, (spec.id, mode, name)
            continue
        distilled.add((spec.id, mode))
        assert variant.sampler == EULER, (spec.id, name)
        assert (variant.steps, variant.flow_shift, variant.guidance_scale) == (4, 5.0, 1.0), (spec.id, name)
        assert variant.guidance_scale_2 in (None, 1.0)
    assert distilled == set(DISTILLED)


@pytest.mark.parametrize(("model", "mode"), DISTILLED)
def test_a_distilled_variant_rebuilds_the_shipped_unipc_as_first_order_at_lightx2vs_timesteps(
    catalog: Catalog, tiny_runtime: ModelRuntimeSettings, model: str, mode: str
) -> None:
    """The adapter's scheduler for the real entries too (no weights here: the shipped scheduler alone)."""
    import numpy as np
    from diffusers import UniPCMultistepScheduler

    pipe = _Pipe(_shipped_unipc())
    adapter = WanTextToVideo(catalog.models[model], tiny_runtime, pipe, device="cpu", dtype="float32")
    adapter._set_scheduler(_job(catalog, model, mode, "distilled"))
    scheduler = pipe.scheduler
    assert type(scheduler) is UniPCMultistepScheduler
    assert scheduler.config.solver_order == 1
    assert set(scheduler.config.disable_corrector) >= set(range(4))
    scheduler.set_timesteps(4)
    assert scheduler.timesteps.tolist() == LIGHTX2V_TIMESTEPS
    np.testing.assert_allclose(scheduler.sigmas[:4].numpy(), LIGHTX2V_SIGMAS, atol=1e-3)
    # Back to the standard recipe: the checkpoint's solver again, whatever ran before.
    adapter._set_scheduler(_job(catalog, model, mode, "standard"))
    assert pipe.scheduler.config.solver_order == 2 and pipe.scheduler.config.disable_corrector == []


class _Pipe:
    """Just what the Wan adapter's constructor and scheduler code read: the scheduler."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler


@pytest.mark.parametrize(("model", "mode"), [m for m in DISTILLED if m[0].startswith("tiny-")])
def test_a_loaded_model_runs_distilled_jobs_first_order_and_standard_ones_with_the_corrector(
    model_cache: ModelCache, catalog: Catalog, monkeypatch: pytest.MonkeyPatch, model: str, mode: str
) -> None:
    """As loaded and run: the timesteps each denoiser saw, and whether UniPC's corrector ran."""
    from diffusers import UniPCMultistepScheduler

    adapter = model_cache.get(catalog.models[model])
    pipe = adapter.pipe  # type: ignore[attr-defined]
    corrections = {"n": 0}
    corrector = UniPCMultistepScheduler.multistep_uni_c_bh_update

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        corrections["n"] += 1
        return corrector(self, *args, **kwargs)

    monkeypatch.setattr(UniPCMultistepScheduler, "multistep_uni_c_bh_update", counting)
    seen: list[int] = []
    handles = [
        module.register_forward_pre_hook(
            lambda _m, _a, kw: seen.append(int(kw["timestep"].flatten()[0])), with_kwargs=True
        )
        for module in (pipe.transformer, pipe.transformer_2)
        if module is not None
    ]
    try:
        for variant in ("distilled", "standard"):
            seen.clear()
            corrections["n"] = 0
            job = _job(catalog, model, mode, variant)
            image = {"image": fitted(job, 1)} if mode == "image_to_video" else {}
            generate(adapter, job, StepLog(), **image)
            scheduler = pipe.scheduler
            assert type(scheduler) is UniPCMultistepScheduler
            if variant == "distilled":
                assert seen == LIGHTX2V_TIMESTEPS  # one forward per step: no CFG
                assert scheduler.config.solver_order == 1 and corrections["n"] == 0
            else:
                assert scheduler.config.solver_order == 2 and scheduler.config.disable_corrector == []
                assert corrections["n"] == job.steps - 1  # UniC corrects every step after the first
    finally:
        for handle in handles:
            handle.remove()

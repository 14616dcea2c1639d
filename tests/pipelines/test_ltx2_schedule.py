"""LTX-2 stage 1 samples Lightricks' sigma list at every size, through the tiny LTX-2 built with the real
scheduler config (the dynamic shift diffusers would otherwise apply per token count)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import Catalog
from foundation.core.resolve import ResolvedJob
from pipelines.families.ltx2 import LTX2TextToVideo, stage_1_sigmas
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog
from tests.pipelines.i2v_support import fitted

MODEL = "tiny-ltx2-two-stage"
# ltx-core's LTX2Scheduler().execute(steps=40) as ti2vid_two_stages.py calls it for stage 1 (no latent):
# packages/ltx-core/src/ltx_core/components/schedulers.py, Lightricks/LTX-2
# @400fd31054597515f47125691032c04b1c3ee24e, run as published (float32).
OFFICIAL_40 = [
    0.9999999403953552, 0.9964492321014404, 0.9927366971969604, 0.9888511896133423, 0.9847801327705383,
    0.9805101752281189, 0.9760261178016663, 0.9713115096092224, 0.9663485288619995, 0.9611163139343262,
    0.9555927515029907, 0.9497528672218323, 0.9435684680938721, 0.937008261680603, 0.9300369024276733,
    0.922614336013794, 0.9146955609321594, 0.9062289595603943, 0.8971556425094604, 0.8874080181121826,
    0.876908004283905, 0.86556476354599, 0.8532729148864746, 0.8399080038070679, 0.8253231048583984,
    0.809343159198761, 0.7917579412460327, 0.7723130583763123, 0.7506966590881348, 0.726523756980896,
    0.6993120908737183, 0.6684503555297852, 0.6331515312194824, 0.5923841595649719, 0.5447711944580078,
    0.48843008279800415, 0.42071861028671265, 0.33780860900878906, 0.23393601179122925, 0.10000002384185791,
    0.0,
]  # fmt: skip


class _FirstStep(Exception):
    """Raised by the transformer's first call: the schedule is set by then, and no step needs to run."""


@pytest.fixture(scope="module")
def ltx(model_cache: ModelCache, catalog: Catalog) -> LTX2TextToVideo:
    adapter = model_cache.get(catalog.models[MODEL])
    assert isinstance(adapter, LTX2TextToVideo)
    return adapter


def _schedule(adapter: LTX2TextToVideo, job: ResolvedJob, image: Any = None) -> list[float]:
    """The sigmas stage 1 is about to sample, read from the scheduler of the pipeline that runs it."""
    seen: list[list[float]] = []
    pipe = adapter._image_pipeline() if image is not None else adapter.pipe

    def stop(module: Any, args: Any, kwargs: Any) -> None:
        seen.append([float(s) for s in pipe.scheduler.sigmas])
        raise _FirstStep

    handle = adapter.pipe.transformer.register_forward_pre_hook(stop, with_kwargs=True)
    try:
        with pytest.raises(_FirstStep):
            adapter.denoise(job, StepLog(), image=image)
    finally:
        handle.remove()
    return seen[0]


def test_the_list_is_ltx_cores() -> None:
    assert [*stage_1_sigmas(40), 0.0] == pytest.approx(OFFICIAL_40, abs=1e-6)


def test_tiny_ltx2_has_ltx2s_scheduler(tiny_models_dir: Path) -> None:
    # As saved (the loaded pipeline's scheduler is the adapter's to swap per job, and the model cache is shared).
    config = json.loads((tiny_models_dir / "tiny-ltx2" / "scheduler" / "scheduler_config.json").read_text())
    assert (config["use_dynamic_shifting"], config["shift_terminal"], config["max_shift"]) == (True, 0.1, 2.05)


@pytest.mark.parametrize("mode", ["text_to_video", "image_to_video"])
@pytest.mark.parametrize("resolution", ["480p", "720p", "1080p"])
def test_stage_1_is_the_official_list(ltx: LTX2TextToVideo, make_job: MakeJob, resolution: str, mode: str) -> None:
    # ltx-2's own job (its sizes, 121 frames, 40 steps) run on the tiny weights: the token count is real.
    real = make_job("ltx-2", resolution=resolution, duration_seconds=5)
    job = real.model_copy(update={"model": MODEL, "weights": ltx.spec.weights, "mode": mode})
    image = fitted(job, 1) if mode == "image_to_video" else None
    assert _schedule(ltx, job, image) == pytest.approx(OFFICIAL_40, abs=1e-6)

"""Every runtime profile the catalog ships for a real model, run on its family's tiny model in bfloat16.

The real entries' profiles (component dtypes, VAE tiling, attention backend, compile, offload) are applied as a
worker override to the tiny model of the same family, so the production dtype layout and knobs run end to end
on CPU. Offload needs CUDA and is skipped on CPU (pipelines/runtime/profile.py), so profiles that differ only in offload
run once. Wan's tiled decode runs at 240p 4:3, wider than its 256-pixel tiles.
"""

from __future__ import annotations

import pytest

from foundation.core.catalog import Catalog, ModelSpec, load_catalog
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.adapter import generate
from pipelines.runtime.registry import load_adapter
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of


def _kind(spec: ModelSpec) -> tuple[str, str]:
    """The adapter, and for the generic adapter the pipeline class it drives (one tiny model per class)."""
    return spec.adapter, spec.diffusers.pipeline if spec.diffusers is not None else ""


def _cpu_distinct_profiles() -> list[tuple[str, str]]:
    """(real model, tiny model of the same adapter) pairs for the text-to-video adapters, one per profile that
    behaves differently on CPU (image-to-video adapters have tests of their own, with an input image)."""
    models = load_catalog().models.values()
    tiny: dict[tuple[str, str], str] = {}
    for s in models:  # the first tiny model of each kind (tiny-wan, not the two-expert tiny-wan-a14b)
        if s.tiny and "text_to_video" in s.modes and s.two_stage is None:
            tiny.setdefault(_kind(s), s.id)
    seen: set[tuple[str, str, str]] = set()
    pairs = []
    for spec in models:
        if spec.tiny or _kind(spec) not in tiny or "text_to_video" not in spec.modes:
            continue
        key = (*_kind(spec), spec.runtime.model_dump_json(exclude={"offload", "notes"}))
        if key not in seen:
            seen.add(key)
            pairs.append((spec.id, tiny[_kind(spec)]))
    return pairs


@pytest.mark.parametrize(("real", "tiny"), _cpu_distinct_profiles())
def test_a_shipped_profile_runs_on_the_tiny_model_in_bfloat16(
    real: str, tiny: str, tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    import torch

    profile = catalog.models[real].runtime
    override = profile.model_dump(exclude={"notes"})
    runtime = tiny_runtime.model_copy(update={"dtype": "bfloat16", "profile_overrides": {tiny: override}})
    adapter = load_adapter(catalog.models[tiny], runtime)
    try:
        pipe = adapter.pipe  # type: ignore[attr-defined]
        assert pipe.transformer.dtype == torch.bfloat16
        for name in ("vae", "text_encoder"):
            want = profile.dtypes.get(name, "bfloat16")
            assert getattr(pipe, name).dtype == getattr(torch, want), name
        assert pipe.vae.use_tiling is profile.vae_tiling
        # Wan tiles are 256 pixels: 240p 4:3 (320x240) is the smallest size that decodes in two tiles.
        wide = profile.vae_tiling and tiny == "tiny-wan"
        size = {"resolution": "240p", "ratio": "4:3"} if wide else {"resolution": "144p", "ratio": "16:9"}
        job = make_job(tiny, variant="fast", duration_seconds=1, **size)
        frames = frames_of(generate(adapter, job, StepLog()))
        assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3) and frames.std() > 0
    finally:
        adapter.unload()

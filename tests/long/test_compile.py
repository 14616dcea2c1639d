"""Regional compile without recompiles (``make test-long``: inductor compiles on this CPU take ~1 min): after
the load-time warm-up, a compiled tiny Wan serves every size it advertises without compiling again."""

from __future__ import annotations

import itertools

import pytest

from foundation.core.catalog import Catalog
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.compile import compiled_graphs, warm_up, warmup_jobs
from pipelines.runtime.registry import load_adapter
from tests.pipelines.conftest import MakeJob


# Inductor's CPU path calls torch.jit.script_method, deprecated in this torch: not ours to fix, and with warnings
# as errors it would make the compile fail (the warm-up then falls back to eager, which this test would catch).
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_after_the_warm_up_no_advertised_size_compiles(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    spec = catalog.models["tiny-wan"]
    runtime = tiny_runtime.model_copy(update={"profile_overrides": {"tiny-wan": {"compile": True}}})
    adapter = load_adapter(spec, runtime)
    try:
        jobs = warmup_jobs(spec, catalog)
        assert warm_up(adapter, jobs) > 0  # it compiled (the blocks are wrapped, lazily compiled)
        settled = compiled_graphs()
        sizes = list(itertools.product(spec.resolutions, spec.ratios, spec.durations))
        for resolution, ratio, seconds in sizes:
            job = make_job("tiny-wan", resolution=resolution, ratio=ratio, duration_seconds=seconds)
            adapter.denoise(job.model_copy(update={"steps": 1}), lambda done, total: None)
        assert compiled_graphs() == settled, f"{compiled_graphs() - settled} compiles over {len(sizes)} sizes"
    finally:
        adapter.unload()

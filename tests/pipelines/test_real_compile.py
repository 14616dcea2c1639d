"""One real compile in make test: tiny-wan's transformer blocks through the production path, inductor generating and
building C++ kernels on this CPU. The model is loaded with its runtime profile's ``compile`` on (so ``compile_blocks``
at load, as a worker does), and warmed by ``warm_up`` on one job of its plan: that denoise compiles (graphs counted,
no fall back to eager) in a fresh inductor directory, so nothing comes from an earlier run. A second denoise of the
same size compiles nothing: it runs the graph the first one made.

Every graph kind, the jobs after the warm-up and a compiled model's second start are tests/long (make test-long).
Inductor calls the machine's C compiler (gcc here and in CI): without one this test fails; it never skips.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from foundation.core.catalog import Catalog
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.compile import WarmupJob, compiled_graphs, run_warmup_job, warm_up, warmup_plan
from pipelines.runtime.compile_cache import INDUCTOR_ENV

MODEL = "tiny-wan"
# Inductor's CPU path calls torch.jit.script_method, deprecated in this torch (tests/long/test_compile.py).
COMPILES = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def _smallest_plain_job(catalog: Catalog) -> WarmupJob:
    """The plan's smallest text job without a LoRA or a cache recipe: the fewest kernels to build."""
    plain = [
        item
        for item in warmup_plan(catalog.models[MODEL], catalog)
        if item.kind.mode == "text_to_video" and item.kind.lora is None and item.kind.cache is None
    ]
    return min(plain, key=lambda item: item.job.gen_width * item.job.gen_height * item.job.num_frames)


@COMPILES
def test_a_tiny_transformer_compiles_for_real_and_a_second_denoise_reuses_its_graph(
    tiny_runtime: ModelRuntimeSettings,
    catalog: Catalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    inductor_dir = tmp_path / "inductor"
    monkeypatch.setenv(INDUCTOR_ENV, str(inductor_dir))
    runtime = tiny_runtime.model_copy(update={"profile_overrides": {MODEL: {"compile": True}}})
    cache = ModelCache(runtime)  # its own: the session's cache keeps its eager tiny-wan
    try:
        adapter = cache.get(catalog.models[MODEL])
        item = _smallest_plain_job(catalog)
        with caplog.at_level(logging.WARNING, logger="genworker.pipelines.compile"):
            graphs = warm_up(adapter, [item])
        assert graphs > 0, f"no graph compiled (compile not applied, or fell back to eager):\n{caplog.text}"
        assert list(inductor_dir.rglob("*.so")), "inductor built no kernel"
        before = compiled_graphs()
        run_warmup_job(adapter, item)
        assert compiled_graphs() == before, "the same size compiled again"
    finally:
        cache.clear()

"""The model cache: one load per model, LRU eviction under a budget, clear after out of memory."""

from __future__ import annotations

import threading
import time

import pytest

from foundation.core.catalog import Catalog
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.adapter import generate
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of

WAN, LTX = "tiny-wan", "tiny-ltx2"


def _cache(runtime: ModelRuntimeSettings, budget_gb: float) -> ModelCache:
    return ModelCache(runtime.model_copy(update={"cache_budget_gb": budget_gb}))


def test_a_second_job_does_not_reload(model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    spec = catalog.models[WAN]
    first = model_cache.get(spec)
    frames_of(generate(first, make_job(WAN, variant="fast", ratio="1:1", duration_seconds=1), StepLog()))
    second = model_cache.get(spec)
    frames_of(generate(second, make_job(WAN, variant="fast", ratio="1:1", duration_seconds=1, seed=2), StepLog()))
    assert second is first
    assert model_cache.load_count(WAN) == 1
    assert WAN in model_cache.loaded()
    seconds = model_cache.load_seconds(WAN)
    assert seconds is not None and seconds > 0


def test_lru_eviction_under_a_small_budget(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    probe = _cache(tiny_runtime, 1.0)
    wan_bytes = probe.get(catalog.models[WAN]).memory_bytes()
    ltx_bytes = probe.get(catalog.models[LTX]).memory_bytes()
    assert probe.loaded() == [WAN, LTX]
    assert probe.resident_bytes() == wan_bytes + ltx_bytes
    probe.clear()
    # Room for the larger model alone, not for both.
    cache = _cache(tiny_runtime, (max(wan_bytes, ltx_bytes) + min(wan_bytes, ltx_bytes) // 2) / 2**30)
    wan = cache.get(catalog.models[WAN])
    cache.get(catalog.models[LTX])
    assert cache.loaded() == [LTX]
    assert wan.pipe is None  # type: ignore[attr-defined]  # unloaded on eviction
    cache.get(catalog.models[WAN])
    assert cache.loaded() == [WAN]
    assert cache.load_count(WAN) == 2 and cache.load_count(LTX) == 1
    assert cache.load_count() == 3
    cache.clear()


def test_most_recently_used_survives(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    cache = _cache(tiny_runtime, 1.0)
    cache.get(catalog.models[WAN])
    cache.get(catalog.models[LTX])
    cache.get(catalog.models[WAN])  # a hit makes WAN the most recently used
    assert cache.loaded() == [LTX, WAN]
    assert cache.load_count() == 2
    cache.clear()


def test_budget_zero_keeps_one_model(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    cache = _cache(tiny_runtime, 0.0)
    cache.get(catalog.models[WAN])
    cache.get(catalog.models[LTX])
    assert cache.loaded() == [LTX]
    cache.clear()


def test_evict_and_clear_unload(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    cache = _cache(tiny_runtime, 1.0)
    wan = cache.get(catalog.models[WAN])
    ltx = cache.get(catalog.models[LTX])
    assert cache.evict(WAN) is True
    assert cache.evict(WAN) is False
    assert wan.pipe is None  # type: ignore[attr-defined]
    assert cache.loaded() == [LTX]
    cache.clear()
    assert cache.loaded() == []
    assert cache.resident_bytes() == 0
    assert ltx.pipe is None  # type: ignore[attr-defined]


def test_loaded_is_readable_while_another_thread_loads(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    cache = _cache(tiny_runtime, 1.0)
    results: list[object] = []
    loader = threading.Thread(target=lambda: results.append(cache.get(catalog.models[LTX])))
    loader.start()
    seen: set[tuple[str, ...]] = set()
    while loader.is_alive():
        seen.add(tuple(cache.loaded()))  # a heartbeat's read: never blocks on the load
        time.sleep(0.005)
    loader.join()
    seen.add(tuple(cache.loaded()))
    assert seen <= {(), (LTX,)}
    assert cache.loaded() == [LTX] and len(results) == 1
    assert cache.get(catalog.models[LTX]) is results[0]
    cache.clear()


def test_concurrent_gets_load_once(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    cache = _cache(tiny_runtime, 1.0)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(cache.get(catalog.models[WAN]))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3 and all(r is results[0] for r in results)
    assert cache.load_count(WAN) == 1
    cache.clear()


@pytest.mark.parametrize("budget_gb", [0.0, 1.0])
def test_load_failure_leaves_the_cache_usable(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, budget_gb: float
) -> None:
    from pipelines.errors import ModelLoadError

    cache = _cache(tiny_runtime, budget_gb)
    broken = catalog.models[WAN].model_copy(update={"id": "tiny-missing", "weights": "tiny-missing"})
    with pytest.raises(ModelLoadError):
        cache.get(broken)
    assert cache.loaded() == [] and cache.load_count() == 0
    cache.get(catalog.models[WAN])
    assert cache.loaded() == [WAN]
    cache.clear()

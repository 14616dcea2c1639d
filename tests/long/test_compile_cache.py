"""Cold starts (``make test-long``: two compiled tiny-wan worker starts, minutes on a CPU): a second worker on the
same image and compile-cache directory finds the first one's caches under the model's key and is ready sooner.
The figures of one run are in docs/benchmarks.md ("Cold starts: a persisted compile cache"); ``make
bench-compile-cache`` reproduces them."""

from __future__ import annotations

from pathlib import Path

from scripts.bench_compile_cache import run


def test_a_second_start_with_the_persisted_compile_cache_is_ready_sooner(tmp_path: Path) -> None:
    results = run(tmp_path, store=False)
    first, second = results["starts"]
    assert first["cache_found"] is None and first["cache_saved"] == ["CompileCacheDir"], first
    assert second["cache_found"] == "CompileCacheDir" and "inductor" in second["cache_loaded"], second
    assert second["key"] == first["key"] and second["key"].split("/")[1].startswith("tiny-wan-")
    # The warm-up is where the compile was: it must take well under what the first start's did.
    assert second["warm_up_s"] < 0.6 * first["warm_up_s"], results
    assert second["ready_s"] < first["ready_s"], results

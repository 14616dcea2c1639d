"""Cold starts with a persisted compile cache (issue 38): a compiled tiny-wan worker's time to ready, first start
against the next ones.

Real ``genworker worker`` processes (SQLite queue, local store, CPU) host and preload ``tiny-wan`` with its
runtime profile's ``compile`` on, so each start loads the model and runs the compile warm-up
(``pipelines.runtime.compile``) before ``/readyz`` answers 200. The starts, one after another, each with a data
directory of its own:

1. ``first``: an empty ``models.compile_cache_dir``: everything compiles, and the caches are kept there;
2. ``second``: another worker on the same image and volume (the same ``compile_cache_dir``): inductor's
   directory and the model's cache artifacts are found under the model's key;
3. ``store_only`` (``--store``): a worker on another machine, an empty directory of its own, with
   ``models.compile_cache_in_store``: only the cache artifacts, from the artifact store the first start wrote.

Per start: seconds from spawn to ready, the warm-up's own time (its log line), and what the compile cache
found and loaded. ``TORCHINDUCTOR_CACHE_DIR`` is removed from the workers' environment, so the first start
cannot use a cache left by anything else.

    python scripts/bench_compile_cache.py [--store] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

READY_TIMEOUT_S = 1800.0  # an inductor compile on a busy CPU takes minutes


def _log_fields(log: Path, message: str) -> dict[str, Any]:
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"msg": "{message}"' in line:
            entry: dict[str, Any] = json.loads(line)
            return entry
    return {}


def start(work: Path, name: str, cache_dir: Path, store_root: Path, tiny: Path, *, in_store: bool) -> dict[str, Any]:
    """One worker start to ready and back down: its figures."""
    from foundation.settings import settings_env
    from tests.integration.worker_harness import WorkerProcess

    settings = {
        "data_dir": str(work / name),
        "queue": {"backend": "sqlite"},
        "store": {"backend": "local", "local_root": str(store_root)},
        "models": {
            "device": "cpu",
            "tiny_models_dir": str(tiny),
            "compile_cache_dir": str(cache_dir),
            "compile_cache_in_store": in_store,
            "compile_cache_key": "bench-compile-cache-shared-key",  # every start is one fleet's worker: one key
            "profile_overrides": {"tiny-wan": {"compile": True}},
        },
        "worker": {"hosted_models": ["tiny-wan"], "preload": ["tiny-wan"], "build_tiny_models": False},
    }
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # WorkerProcess passes this environment on
    log = work / f"{name}.log"
    started = time.monotonic()
    worker = WorkerProcess(settings_env(settings), log).start()
    try:
        worker.wait_ready(timeout_s=READY_TIMEOUT_S)
        ready_s = time.monotonic() - started
    finally:
        worker.stop()
    warm = _log_fields(log, "compile warm-up done")
    cache = _log_fields(log, "compile cache")
    return {
        "start": name,
        "ready_s": round(ready_s, 2),
        "warm_up_s": round(warm.get("elapsed_ms", 0) / 1000, 2),
        "graphs": warm.get("graphs"),
        "cache_found": cache.get("found"),
        "cache_loaded": cache.get("loaded"),
        "cache_saved": cache.get("saved"),
        "key": cache.get("key"),
    }


def run(work: Path, *, store: bool) -> dict[str, Any]:
    from pipelines.tiny.builders import build_all

    tiny = work / "tiny"
    build_all(str(tiny))  # before any timing: both starts read the same built models
    shared, store_root = work / "compile-cache", work / "store"
    starts = [
        start(work, "first", shared, store_root, tiny, in_store=store),
        start(work, "second", shared, store_root, tiny, in_store=store),
    ]
    if store:
        starts.append(start(work, "store_only", work / "other-machine-cache", store_root, tiny, in_store=True))
    first, second = starts[0], starts[1]
    return {
        "model": "tiny-wan",
        "device": "cpu",
        "cpus": os.cpu_count(),
        "starts": starts,
        "second_vs_first_ready": round(second["ready_s"] / first["ready_s"], 3),
        "second_vs_first_warm_up": round(second["warm_up_s"] / max(first["warm_up_s"], 1e-9), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", action="store_true", help="add a third start with the artifact store only")
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="genworker-compile-cache-") as tmp:
        results = run(Path(tmp), store=args.store)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

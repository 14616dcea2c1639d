"""What a live preview costs the denoising loop on the tiny models (docs/benchmarks.md, "Live previews").

Per tiny text-to-video model: one job (144p 16:9, 1 s, seed 1) denoised without previews, timing each step
(the time between two step reports), then the same job with a preview at every step, timing each preview
(``Previews.seconds``: projection, scale, JPEG). Prints one JSON line per model with the medians and their
ratio, and writes ``var/bench/previews.json``. CPU by default (the tiny models' device).

    python scripts/bench_previews.py [--models tiny-wan,tiny-ltx2] [--jobs 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

from foundation.core.contract import CreateRequest
from foundation.core.resolve import resolve
from foundation.settings import load_settings
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.options import load_model_catalog
from pipelines.runtime.previews import PreviewCadence, Previews
from worker.context import ensure_tiny_models

DEFAULT_MODELS = "tiny-wan,tiny-ltx2,tiny-wan-ti2v,tiny-hunyuan15,tiny-skyreels-v2"


def _job(catalog: Any, model: str, seed: int) -> Any:
    request = CreateRequest.model_validate(
        {
            "model": model,
            "mode": "text_to_video",
            "variant": "standard",
            "parameters": {"resolution": "144p", "ratio": "16:9", "duration_seconds": 1, "seed": seed},
            "input": {"prompt": "a red fox running through snow"},
        }
    )
    return resolve(request, catalog)[0]


def measure(cache: ModelCache, catalog: Any, model: str, jobs: int) -> dict[str, Any]:
    adapter = cache.get(catalog.models[model])
    adapter.denoise(_job(catalog, model, 0), lambda done, total: None)  # warm-up: first-call allocations
    steps: list[float] = []
    previews = Previews(lambda preview: None, PreviewCadence(every_steps=1, interval_s=0.0))
    for seed in range(1, jobs + 1):
        marks: list[float] = []

        def mark(done: int, total: int, marks: list[float] = marks) -> None:
            marks.append(time.perf_counter())

        adapter.denoise(_job(catalog, model, seed), mark)
        steps += [b - a for a, b in itertools.pairwise(marks)]  # from step 1's report on: the setup is left out
        adapter.denoise(_job(catalog, model, seed), lambda done, total: None, previews=previews)
    step_ms = statistics.median(steps) * 1000
    preview_ms = statistics.median(previews.seconds) * 1000
    return {
        "model": model,
        "steps_timed": len(steps),
        "previews_timed": len(previews.seconds),
        "median_step_ms": round(step_ms, 2),
        "median_preview_ms": round(preview_ms, 3),
        "preview_share_of_step": round(preview_ms / step_ms, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--jobs", type=int, default=3, help="jobs per model (each timed with and without previews)")
    args = parser.parse_args()
    settings = load_settings(None)
    catalog = load_model_catalog(settings.catalog_path)
    models = args.models.split(",")
    ensure_tiny_models(settings, catalog, models)
    cache = ModelCache(settings.models)
    rows = []
    for model in models:
        row = measure(cache, catalog, model, args.jobs)
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = Path("var/bench/previews.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

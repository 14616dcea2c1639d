"""Pipeline benchmark: where a tiny-model job's time goes, cold (first job in a process) vs warm.

Stages per job: ``load`` (``from_pretrained`` through the model cache; cold only), ``prompt`` (prompt
extension), ``denoise``, ``decode`` (VAE and, for LTX-2, audio VAE + vocoder) and ``to_uint8`` (frames
leaving as uint8 chunks, as the encoder pulls them). Warm figures are medians over repeated jobs on the
loaded model. ``import_diffusers_s`` is reported apart: it is paid once per process, before any load.

    python scripts/bench_pipelines.py [--quick] [--gpu]

``--gpu`` runs on CUDA; extra catalog models (real weights, e.g. ``wan2.1-t2v-1.3b``) can be added with
``GENWORKER_BENCH_MODELS=id1,id2`` (weights from ``GENWORKER_MODELS__WEIGHTS_DIR`` or the hub cache).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TINY = ("tiny-wan", "tiny-ltx2")
STAGES = ("load", "prompt", "denoise", "decode", "to_uint8")


def _job(catalog: Any, model: str, seed: int) -> Any:
    from foundation.core.contract import CreateRequest
    from foundation.core.resolve import resolve

    spec = catalog.models[model]
    params = dict(spec.defaults)
    params.update(seed=seed, prompt_extend=spec.prompt_extend is not None)
    request = CreateRequest.model_validate(
        {
            "model": model,
            "mode": "text_to_video",
            "variant": "standard",
            "parameters": params,
            "input": {"prompt": "a red fox running through fresh snow at dawn"},
        }
    )
    return resolve(request, catalog)[0]


def _one_job(cache: Any, spec: Any, job: Any) -> dict[str, float]:
    from pipelines.runtime.prompt_extend import extend_or_fallback

    started = time.perf_counter()
    adapter = cache.get(spec)
    stages = {"load": time.perf_counter() - started}
    started = time.perf_counter()
    prompt, extension = extend_or_fallback(adapter, job) if job.prompt_extend else (job.prompt, None)
    stages["prompt"] = time.perf_counter() - started
    job = job.model_copy(update={"prompt": prompt})
    started = time.perf_counter()
    latents = adapter.denoise(job, lambda done, total: None)
    stages["denoise"] = time.perf_counter() - started
    started = time.perf_counter()
    media = adapter.decode(latents, job)
    stages["decode"] = time.perf_counter() - started
    started = time.perf_counter()
    frames = sum(chunk.shape[0] for chunk in media.chunks)
    stages["to_uint8"] = time.perf_counter() - started
    assert frames == job.num_frames
    if extension is not None and extension.status != "applied":
        stages["prompt_fallback"] = 1.0
    return stages


def _bench_model(cache: Any, catalog: Any, model: str, repeats: int) -> dict[str, Any]:
    spec = catalog.models[model]
    job = _job(catalog, model, seed=0)
    cold = _one_job(cache, spec, job)
    warm_runs = [_one_job(cache, spec, _job(catalog, model, seed=1 + i)) for i in range(repeats)]
    warm = {stage: statistics.median(run[stage] for run in warm_runs) for stage in STAGES}
    return {
        "job": f"{job.resolution} {job.ratio} {job.duration_seconds}s: {job.gen_width}x{job.gen_height}x"
        f"{job.num_frames} frames, {job.steps} steps, audio={job.audio}, prompt_extend={job.prompt_extend}",
        "cold": {
            "stages_s": {stage: round(cold[stage], 4) for stage in STAGES},
            "total_s": round(sum(cold.values()), 3),
        },
        "warm": {
            "stages_s": {stage: round(warm[stage], 4) for stage in STAGES},
            "total_s": round(sum(warm.values()), 3),
            "runs": repeats,
            "total_samples_ms": [round(1000 * sum(run[s] for s in STAGES), 1) for run in warm_runs],
        },
        "loads": cache.load_count(model),
    }


def run(quick: bool = False, gpu: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    import diffusers  # noqa: F401  (timed: paid once per process)

    import_s = time.perf_counter() - started
    from foundation.core.catalog import load_catalog
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.cache import ModelCache
    from pipelines.tiny.builders import build_all

    catalog = load_catalog()
    models = list(TINY)
    if gpu:
        models += [m for m in os.environ.get("GENWORKER_BENCH_MODELS", "").split(",") if m]
    repeats = 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="bench-tiny-") as tiny_dir:
        build_started = time.perf_counter()
        build_all(tiny_dir)
        build_s = time.perf_counter() - build_started
        runtime = ModelRuntimeSettings(
            device="cuda" if gpu else "cpu",
            tiny_models_dir=tiny_dir,
            weights_dir=os.environ.get("GENWORKER_MODELS__WEIGHTS_DIR"),
            cache_budget_gb=1000.0,
        )
        cache = ModelCache(runtime)
        results = {model: _bench_model(cache, catalog, model, repeats) for model in models}
        cache.clear()
    return {
        "notes": "Tiny random-weight models (real diffusers classes). load is cold only (the cache keeps the "
        "model); warm = median of repeated jobs on the loaded model. import_diffusers_s is paid once per process.",
        "device": "cuda" if gpu else "cpu",
        "import_diffusers_s": round(import_s, 3),
        "build_tiny_models_s": round(build_s, 3),
        "models": results,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(quick=args.quick, gpu=args.gpu), indent=2))

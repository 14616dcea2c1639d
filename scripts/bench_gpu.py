"""GPU benchmark (``make bench-gpu``): seconds per step, peak memory and MFU per model x variant x profile,
against the physical floor (the denoising FLOPs divided by the device's dense bf16 peak).

    make bench-gpu                                   # every real catalog model whose weights the node has
    python scripts/bench_gpu.py --models wan2.1-t2v-14b --variants standard cached --profiles default fp8
    python scripts/bench_gpu.py --dry-run            # no GPU: the plan and the computed floors (docs/gpu.md)
    python scripts/bench_gpu.py --random-weights --deadline-s 420 --out gpu.json   # no weights needed
    python scripts/bench_gpu.py --random-weights --dry-run                        # the same, tiny, on CPU

``--random-weights`` (``scripts/bench_gpu_random.py``) builds the headline models at full size with random
weights from configs/arch/ and times every stage through the production adapters, each job inside its share of
the deadline (the order, the budgets and the offload each job gets are printed first, and by ``--dry-run``); the
device run of ``make device-bundle`` is this mode (docs/gpu-appendix.md, "Measuring without weights").

A run loads each model once per profile (``default``: the catalog's runtime profile; ``fp8``: fp8 storage;
``compile``: regional compile), runs each variant's default job once to warm up and once timed. FLOPs are
counted on the real model code (``pipelines.runtime.flops``), so MFU needs no per-model formula. The dry run
computes the floors of the Wan text-to-video models from their architecture configs on the meta device
(other families' denoiser inputs are their pipelines' own: they are counted when run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROFILES: dict[str, dict[str, Any]] = {"default": {}, "fp8": {"fp8": "storage"}, "compile": {"compile": True}}
H100_SXM_TFLOPS = 989.4
TEXT_TOKENS = 512  # UMT5 context of every Wan checkpoint


def _job(catalog: Any, model: str, variant: str) -> Any:
    from foundation.core.contract import CreateRequest
    from foundation.core.resolve import resolve

    spec = catalog.models[model]
    mode = next(iter(spec.modes))
    request = CreateRequest.model_validate(
        {
            "model": model,
            "mode": mode,
            "variant": variant,
            "parameters": {**spec.defaults, "seed": 0, "prompt_extend": False},
            "input": {"prompt": "a red fox running through fresh snow at dawn, cinematic"},
        }
    )
    return resolve(request, catalog)[0]


def wan_floor(catalog: Any, model: str, variant: str) -> dict[str, Any] | None:
    """Computed FLOPs per step and the floor on one H100 for a Wan text-to-video job (None: other families)."""
    import torch
    from diffusers import WanTransformer3DModel

    from pipelines.runtime.flops import forward_flops

    spec = catalog.models[model]
    arch = ROOT / "configs" / "arch" / model / "transformer.json"
    if spec.family != "wan" or "text_to_video" not in spec.modes or not arch.exists():
        return None
    job = _job(catalog, model, variant)
    config = json.loads(arch.read_text())["config"]
    vae = json.loads((arch.parent / "vae.json").read_text())["config"]
    temporal, spatial = 2 ** sum(vae["temperal_downsample"]), 2 ** len(vae["temperal_downsample"])
    with torch.device("meta"):
        module = WanTransformer3DModel.from_config(config)
    shape = (1, vae["z_dim"], (job.num_frames - 1) // temporal + 1, job.gen_height // spatial, job.gen_width // spatial)
    inputs = {
        "hidden_states": torch.empty(shape, device="meta"),
        "timestep": torch.empty(1, dtype=torch.long, device="meta"),
        "encoder_hidden_states": torch.empty(1, TEXT_TOKENS, config["text_dim"], device="meta"),
        "return_dict": False,
    }
    forwards = 2 if job.guidance_scale > 1.0 else 1
    step = forward_flops(module, (), inputs) * forwards
    # A cache recipe skips the blocks on its predicted steps: count only the steps that run them.
    steps = job.steps
    if job.cache is not None and job.cache.kind == "taylorseer":
        c = job.cache
        steps = sum(1 for s in range(job.steps) if s < c.warmup_steps or (s - c.warmup_steps - 1) % c.interval == 0)
    total = step * steps
    return {
        "job": f"{job.gen_width}x{job.gen_height}x{job.num_frames}, {job.steps} steps, {forwards} forwards/step",
        "pflops_per_step": round(step / 1e15, 3),
        "steps_computed": steps,
        "floor_s_h100": round(total / (H100_SXM_TFLOPS * 1e12), 1),
    }


def dry_run(models: list[str], variants: list[str] | None) -> dict[str, Any]:
    from foundation.core.catalog import load_catalog

    catalog = load_catalog()
    plan: dict[str, Any] = {}
    for model in models:
        spec = catalog.models[model]
        names = [v for mode in spec.modes.values() for v in mode.variants if variants is None or v in variants]
        plan[model] = {name: wan_floor(catalog, model, name) or "counted when run" for name in names}
    return {"dry_run": True, "peak_tflops": H100_SXM_TFLOPS, "plan": plan}


def _bench(catalog: Any, model: str, variants: list[str] | None, profile: str, device: str) -> dict[str, Any]:
    import torch

    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.planning.mfu import achieved
    from pipelines.runtime.registry import load_adapter

    spec = catalog.models[model]
    runtime = ModelRuntimeSettings(
        device=device,
        weights_dir=os.environ.get("GENWORKER_MODELS__WEIGHTS_DIR"),
        profile_overrides={model: PROFILES[profile]} if PROFILES[profile] else {},
    )
    adapter = load_adapter(spec, runtime)
    results: dict[str, Any] = {}
    try:
        names = [v for mode in spec.modes.values() for v in mode.variants if variants is None or v in variants]
        for name in names:
            job = _job(catalog, model, name)
            adapter.denoise(job, lambda done, total: None)  # warm-up (compile, allocator, kernels)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            stamps: list[float] = []

            def stamp(done: int, total: int, stamps: list[float] = stamps) -> None:
                stamps.append(time.perf_counter())

            started = time.perf_counter()
            latents = adapter.denoise(job, stamp)  # its stats: the denoisers' calls, counted here
            torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            flops = latents.stats.flops
            tflops, mfu = achieved(flops.total() if flops is not None else 0.0, seconds, device)
            steps = [b - a for a, b in zip([started, *stamps], stamps, strict=False)]
            results[name] = {
                "s_per_step_median": round(statistics.median(steps), 3),
                "denoise_s": round(seconds, 2),
                "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                "tflops": round(tflops, 1),
                "mfu": None if mfu is None else round(mfu, 3),
                "floor": wan_floor(catalog, model, name),
            }
    finally:
        adapter.unload()
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from foundation.core.catalog import load_catalog

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", help="catalog ids (default: every real model)")
    parser.add_argument("--variants", nargs="*", help="variant names (default: all of each model)")
    parser.add_argument("--profiles", nargs="*", default=["default"], choices=sorted(PROFILES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: the plan and the computed floors")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--random-weights", action="store_true", help="full-size random weights, no checkpoints")
    parser.add_argument(
        "--deadline-s", type=float, default=420.0, help="--random-weights: the whole run's deadline, shared by the jobs"
    )
    parser.add_argument("--jobs", nargs="*", help="--random-weights: job keys or model ids (default: all, in order)")
    parser.add_argument(
        "--no-backends", action="store_true", help="--random-weights: skip the backend comparison (Wan 2.1's)"
    )
    parser.add_argument(
        "--shallow",
        action="store_true",
        help="--random-weights --dry-run: real widths at a few blocks instead of tiny ones (GBs of memory, minutes)",
    )
    args = parser.parse_args(argv)
    if args.random_weights:
        from scripts.bench_gpu_random import run

        device = "cpu" if args.dry_run else args.device
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                parser.error("no CUDA device: add --dry-run for the tiny CPU run of the same path")
        return run(
            jobs=args.jobs,
            deadline_s=args.deadline_s,
            out=args.out,
            dry_run=args.dry_run,
            device=device,
            backends=not args.no_backends,
            shallow=args.shallow,
        )
    catalog = load_catalog()
    models = args.models or [m for m, spec in catalog.models.items() if not spec.tiny]
    if args.dry_run:
        results = dry_run(models, args.variants)
    else:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device: run with --dry-run for the plan and the computed floors")
        results = {
            "device": torch.cuda.get_device_name(),
            "runs": {
                f"{model} [{profile}]": _bench(catalog, model, args.variants, profile, args.device)
                for model in models
                for profile in args.profiles
            },
        }
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return results


if __name__ == "__main__":
    main()

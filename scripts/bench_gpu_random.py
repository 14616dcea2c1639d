"""``bench_gpu.py --random-weights``: every headline model at full size with random weights, through the production
adapters, stage by stage, under a deadline; JSON after each step of the run, and a table at the end.

Jobs, most important first (``JOBS``): Wan 2.1 T2V 14B 480p 16:9 5 s ``standard`` (1 warm-up step + 3 timed)
and its ``distilled`` variant end to end; Wan 2.2 T2V A14B 720p (both experts run: 4 steps at shift 12 put the
4th past the 0.875 boundary); LTX-2 at its default size (stage 1 at half size with CFG, the x2 upsampler, the
whole refinement); HunyuanVideo 1.5 480p. Each model is built once (``scripts.random_pipelines``: the production
adapter over random components, runtime profile with offload off) and measured:

- text encode: the text encoder(s) (and LTX-2's connectors) inside the adapter's own call;
- s/step as the recipe runs it (CFG where the variant has it), per expert or stage, each step timed to its
  end on the device; MFU from the FLOPs of exactly those calls (``pipelines.planning.flops``);
- decode: the adapter's ``decode`` until the last uint8 frame is on the host;
- end to end: text encode + the recipe's steps at the measured s/step + decode (measured outright for the
  distilled variant); peak device memory against the memory plan (``offload: none``);
- then, on one captured denoiser call: each attention backend and FP8 mode, speed and max |difference| from
  SDPA (``scripts.bench_backends``).

The deadline is cooperative: a phase starts only when the time left covers its estimate (from what was already
measured), a denoising loop stops at the step where time runs out (through the adapter's own cancel path), and
every result is written the moment it exists. ``--dry-run`` runs all of it on CPU at the tiny widths of the
same architectures and tiny sizes.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.bench_gpu_report import table, targets
from scripts.bench_gpu_stages import (
    Deadline,
    DeadlineReached,
    free_memory,
    measure_end_to_end,
    measure_steps,
    synchronize,
    warm_libraries,
)

__all__ = ["JOBS", "Deadline", "DeadlineReached", "ModelJob", "run"]

MIN_MODEL_S = 60.0  # on a GPU, a model is not started with less than this left (build + a step + decode)


@dataclass(frozen=True)
class ModelJob:
    key: str
    model: str
    resolution: str | None  # None: the model's default
    seconds: int | None
    variants: tuple[str, ...]  # the first is timed step by step; the others run end to end
    warmup: int = 1
    timed: int = 3
    target_steps: int | None = None  # the step count the targets are set at
    dry_size: tuple[int, int, int] = (64, 64, 5)  # width, height, frames in the dry run


JOBS: tuple[ModelJob, ...] = (
    ModelJob("wan2.1-14b", "wan2.1-t2v-14b", "480p", 5, ("standard", "distilled"), target_steps=40),
    ModelJob("wan2.2-a14b", "wan2.2-t2v-a14b", "720p", 5, ("standard",)),
    # Two stages: stage 1 at half the size on the VAE's 32 stride, so 128x64 is the least; 8k+1 frames.
    ModelJob("ltx-2", "ltx-2", None, None, ("standard",), timed=2, dry_size=(128, 64, 9)),
    ModelJob("hunyuan1.5-480p", "hunyuanvideo-1.5-480p", "480p", None, ("standard",), timed=2),
)


class Results:
    """What the run measured so far, rewritten to ``out`` (atomically) after every addition."""

    def __init__(self, out: Path | None, header: dict[str, Any]) -> None:
        self.out = out
        self.data: dict[str, Any] = {**header, "jobs": [], "backends": {}, "dropped": [], "finished": False}

    def add_job(self, entry: dict[str, Any]) -> dict[str, Any]:
        self.data["jobs"].append(entry)
        self.write()
        return entry

    def add_backend(self, model: str, entry: dict[str, Any]) -> None:
        self.data["backends"].setdefault(model, []).append(entry)
        self.write()

    def drop(self, what: str, why: str) -> None:
        self.data["dropped"].append({"what": what, "why": why})
        self.write()

    def write(self) -> None:
        if self.out is None:
            return
        self.data["targets"] = targets(self.data)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n", encoding="utf-8")
        tmp.replace(self.out)


def _job(catalog: Any, mj: ModelJob, variant: str, dry_run: bool) -> Any:
    from foundation.core.contract import CreateRequest
    from foundation.core.resolve import resolve

    spec = catalog.models[mj.model]
    params = {**spec.defaults, "seed": 0, "prompt_extend": False}
    if mj.resolution:
        params["resolution"] = mj.resolution
    if mj.seconds:
        params["duration_seconds"] = mj.seconds
    mode = "text_to_video"
    request = CreateRequest.model_validate(
        {"model": mj.model, "mode": mode, "variant": variant, "parameters": params, "input": {"prompt": PROMPT}}
    )
    job = resolve(request, catalog)[0]
    if dry_run:
        w, h, f = mj.dry_size
        job = job.model_copy(update={"width": w, "height": h, "gen_width": w, "gen_height": h, "num_frames": f})
        job = job.model_copy(update={"keep_frames": f})
    return job


PROMPT = "a red fox running through fresh snow at dawn, cinematic, shallow depth of field"
# ------------------------------------------------------------------------------------------------- the run


def _header(device: str, dry_run: bool, deadline_s: float) -> dict[str, Any]:
    import diffusers
    import torch
    import transformers

    from pipelines.planning.flops import peak_tflops
    from pipelines.planning.memory_plan import device_memory_gb

    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else f"{platform.processor() or 'cpu'}"
    capability = list(torch.cuda.get_device_capability(device)) if device.startswith("cuda") else None
    return {
        "bench": "bench_gpu.py --random-weights",
        "dry_run": dry_run,
        "device": name,
        "capability": capability,
        "device_memory_gb": device_memory_gb(device),
        "peak_bf16_tflops": peak_tflops(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
        "transformers": transformers.__version__,
        "commit": _commit(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "deadline_s": deadline_s,
    }


def _commit() -> str | None:
    if os.environ.get("GENWORKER_COMMIT"):
        return os.environ["GENWORKER_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def run(
    *,
    jobs: list[str] | None,
    deadline_s: float,
    out: Path | None,
    dry_run: bool,
    device: str,
    backends: bool = True,
    shallow: bool = False,
) -> dict[str, Any]:
    """The whole random-weights run (``bench_gpu.py --random-weights``); returns what it wrote to ``out``."""
    import diffusers

    from foundation.core.catalog import load_catalog
    from scripts.bench_backends import compare

    diffusers.utils.logging.set_verbosity_error()  # not one "experimental feature" notice per backend switch
    deadline = Deadline(deadline_s)
    catalog = load_catalog()
    selected = [mj for mj in JOBS if jobs is None or mj.key in jobs or mj.model in jobs]
    results = Results(out, _header(device, dry_run, deadline_s))
    results.data["scale"] = ("shallow" if shallow else "tiny") if dry_run else "full"
    for mj in selected:
        min_left = 0.0 if dry_run else MIN_MODEL_S
        if deadline.left() <= min_left:
            results.drop(mj.key, f"deadline: {max(deadline.left(), 0):.0f} s left")
            continue
        ctx = {"device": device, "deadline": deadline, "spec": catalog.models[mj.model], "dry_run": dry_run}
        ctx["shallow"] = shallow
        rm = None
        try:
            rm = build_model(ctx, mj, results)
            captured = _run_variants(ctx, catalog, rm, mj, results)
            if backends and captured is not None:
                compare(ctx, rm, mj, captured, results)
        except DeadlineReached as e:
            results.drop(mj.key, f"cut: {e}")
        except Exception as e:  # one model's failure (out of memory, a kernel) must not cost the others
            results.drop(mj.key, f"error: {type(e).__name__}: {str(e)[:400]}")
            traceback.print_exc(file=sys.stderr)
        finally:
            if rm is not None:
                rm.adapter.unload()
            del rm
            free_memory(device)
    results.data["elapsed_s"] = round(deadline.elapsed(), 1)
    results.data["finished"] = True
    results.write()
    results.data["targets"] = targets(results.data)
    print(table(results.data))
    return results.data


def build_model(ctx: dict[str, Any], mj: ModelJob, results: Results) -> Any:
    """The production adapter over random full-size components (tiny ones in the dry run), timed."""
    from scripts.random_pipelines import random_adapter

    device = ctx["device"]
    variants = [("text_to_video", v) for v in mj.variants]
    synchronize(device)
    started = time.perf_counter()
    scale = ("shallow" if ctx.get("shallow") else "tiny") if ctx["dry_run"] else "full"
    rm = random_adapter(ctx["spec"], device=device, variants=variants, scale=scale)
    warm_libraries(device)
    synchronize(device)
    results.data.setdefault("builds", {})[mj.model] = {
        "build_s": round(time.perf_counter() - started, 2),
        "weights_gb": round(rm.weight_bytes / 1e9, 2),
        "profile": rm.profile.model_dump(exclude={"notes"}),
    }
    results.write()
    return rm


def _run_variants(ctx: dict[str, Any], catalog: Any, rm: Any, mj: ModelJob, results: Results) -> Any:
    """The model's variants in order: the first step by step (its call captured), the rest end to end."""
    captured = None
    for i, variant in enumerate(mj.variants):
        job = _job(catalog, mj, variant, ctx["dry_run"])
        if i == 0:
            entry, captured = measure_steps(ctx, rm, mj, job)
            results.add_job(entry)
            if "cut" in entry:
                raise DeadlineReached(entry["cut"])
            ctx["forward_s"] = min(g["s_per_step"] for g in entry["groups"].values())
            continue
        need = ctx.get("forward_s", 0.0) * job.steps + results.data["jobs"][-1]["decode_s"]
        if not ctx["dry_run"] and ctx["deadline"].left() < need:
            results.drop(f"{mj.model} {variant}", f"deadline: {ctx['deadline'].left():.0f} s left, needs ~{need:.0f}")
            continue
        results.add_job(measure_end_to_end(ctx, rm, mj, job))
    return captured

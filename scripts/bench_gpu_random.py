"""``bench_gpu.py --random-weights``: every headline model at full size with random weights, through the production
adapters, stage by stage, each job inside its share of the deadline; JSON after each step of the run, and tables.

Jobs, in order (``JOBS``): the best understood first, then what has never run on a GPU before the deadline can
take it away.

1. Wan 2.1 T2V 14B 480p 16:9 5 s: ``standard`` (1 warm-up step + 3 timed) and ``distilled`` end to end, then the
   attention backends and FP8 on one captured transformer call (``scripts.bench_backends``): the only job that
   compares them;
2. LTX-2 at its default size: text_to_video (stage 1 at half size with CFG, the x2 upsampler, the whole refinement),
   then image_to_video end to end at 2 stage-1 steps (``LTX2ImageToVideoPipeline`` built over the same modules,
   an image made in code and fitted as the worker fits one);
3. HunyuanVideo 1.5 480p;
4. Wan 2.2 T2V A14B 480p (both experts run: 4 steps at shift 12 put the 4th past the 0.875 boundary).

Each model is built once (``scripts.random_pipelines``: the production adapter over random components) with the
offload its memory plan gives the device (``choose_offload``), and measured: text encode; s/step as the recipe runs
it, per expert or stage, with MFU (``pipelines.planning.mfu``); decode; end to end; peak memory beside the plan's;
after every run, each component's parameter dtypes against the build's (a change is a failure).

Budgets. Each job's phases are estimated before anything runs: the denoiser's FLOPs per forward at full size (the
full-size simulation's counts) at ``MFU`` of the device's dense bf16 peak, plus assumed seconds for the build, text
encoding and decoding. A job starts with the share of the time left that its estimate is of the estimates of the
jobs not yet run (``budget``), so a job that finishes early hands the rest on and one that fails hands on all of it.
Inside its budget, no phase (build, a variant's run, the image_to_video run, the backend reference and each
variant) starts unless its estimate fits in the time left: a job starts when its build and its shortest first run
(the warm-up, one timed step, a decode) fit, and its first run times as many steps as then fit, up to its own
count; once that run is measured the job's estimates are scaled to it (``Estimate.measured``). A denoising loop
stops at the step where the budget runs out (through the adapter's own cancel path) and every result is written the
moment it exists. ``--dry-run`` prints the same plan (order, phases, budgets at the device's 420 s) and runs all of
it on CPU at the tiny widths of the same architectures and tiny sizes, with the budgets reported but not enforced
(a CPU's seconds are not a GPU's).
"""

from __future__ import annotations

import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scripts.bench_gpu_report import Results, header, plan_table, table
from scripts.bench_gpu_stages import (
    Deadline,
    DeadlineReached,
    component_dtypes,
    dtype_changes,
    free_memory,
    job_label,
    measure_end_to_end,
    measure_steps,
    synchronize,
    warm_libraries,
)

__all__ = ["JOBS", "MFU", "Deadline", "DeadlineReached", "Estimate", "JobPlan", "ModelJob", "budget", "run"]

MFU = 0.35  # stock diffusers on an H100 (Wan 2.1 14B at 9.77 s/step): the rate every estimate assumes
PLAN_PEAK_TFLOPS = 989.4  # dense bf16 of an H100 SXM and an H200: the peak where the device's own is unknown
PLAN_DEVICE = "h200-141gb"  # the memory class offload is planned for without a CUDA device: the device command's
IMAGE_MODE = "image_to_video"


@dataclass(frozen=True)
class ModelJob:
    key: str
    model: str
    resolution: str | None  # None: the model's default
    seconds: int | None
    variants: tuple[str, ...]  # the first is timed step by step; the others run end to end
    # One denoiser forward of one CFG branch at the job's full size, in PFLOPs (the full-size simulation's counts;
    # LTX-2 batches its branches, and its figure is taken per branch: an upper bound).
    forward_pflops: float
    refine_pflops: float = 0.0  # what every run adds whatever its step count: LTX-2's 3 refinement steps
    other_s: float = 15.0  # assumed, until measured: text encode + decode of one run
    build_s: float = 20.0  # assumed: building the random model (and rebuilding a denoiser for FP8 compute)
    warmup: int = 1
    timed: int = 3
    image_steps: int | None = None  # image_to_video of the first variant, end to end at this many steps
    backends: bool = False  # the attention / FP8 comparison on this job's first denoiser
    target_steps: int | None = None  # the step count the targets are set at
    dry_size: tuple[int, int, int] = (64, 64, 5)  # width, height, frames in the dry run


JOBS: tuple[ModelJob, ...] = (
    ModelJob("wan2.1-14b", "wan2.1-t2v-14b", "480p", 5, ("standard", "distilled"), 1.678, backends=True,
             target_steps=40),
    # Two stages: stage 1 at half the size on the VAE's 32 stride, so 128x64 is the least; 8k+1 frames.
    ModelJob("ltx-2", "ltx-2", None, None, ("standard",), 0.218, refine_pflops=3 * 0.597, other_s=20.0, timed=2,
             image_steps=2, dry_size=(128, 64, 9)),
    ModelJob("hunyuan1.5-480p", "hunyuanvideo-1.5-480p", "480p", None, ("standard",), 1.395, other_s=30.0, timed=2),
    ModelJob("wan2.2-a14b", "wan2.2-t2v-a14b", "480p", 5, ("standard",), 1.678, build_s=30.0),
)  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """Seconds one job's phases are expected to take on the device."""

    forward_s: float  # one denoiser forward of one CFG branch
    refine_s: float  # the forwards every run adds (LTX-2's refinement)
    other_s: float  # text encode + decode of one run
    build_s: float

    def run(self, steps: int, branches: int) -> float:
        return steps * branches * self.forward_s + self.refine_s + self.other_s

    def measured(self, entry: dict[str, Any], steps: int, branches: int) -> Estimate:
        """Scaled to a measured run of ``steps`` steps: its denoising time against the estimate's, its text encode
        and decode in place of the assumed ones (kept where the run was cut before decoding)."""
        denoise = sum(entry["step_s"]) - entry["text_encode_s"]
        planned = steps * branches * self.forward_s + self.refine_s
        scale = denoise / planned if denoise > 0 and planned > 0 else 1.0
        decoded = entry.get("decode_s")
        other = self.other_s if decoded is None else entry["text_encode_s"] + decoded
        return Estimate(self.forward_s * scale, self.refine_s * scale, other, self.build_s)


@dataclass(frozen=True)
class JobPlan:
    """One job as the run plans it before anything is measured."""

    job: ModelJob
    size: str  # the full-size job, width x height x frames
    offload: str  # ``choose_offload``
    peak_gb: dict[str, float]  # the memory plan's peak under offload none / model
    usable_gb: float  # the device's memory less the plan's reserve
    estimate: Estimate
    phases: dict[str, float]  # each phase, in run order, and its estimated seconds
    start_s: float  # what the job needs to start: the build and the shortest first run (warm-up, 1 step, decode)

    @property
    def estimate_s(self) -> float:
        return sum(self.phases.values())


def budget(left_s: float, plans: list[JobPlan]) -> float:
    """The first of ``plans``' share of ``left_s``: its estimate over the estimates of it and every job after it."""
    return max(left_s, 0.0) * plans[0].estimate_s / sum(p.estimate_s for p in plans)


def _job(catalog: Any, mj: ModelJob, variant: str, dry_run: bool, mode: str = "text_to_video") -> Any:
    from foundation.core.contract import CreateRequest
    from foundation.core.resolve import resolve

    spec = catalog.models[mj.model]
    params = {**spec.defaults, "seed": 0, "prompt_extend": False}
    if mj.resolution:
        params["resolution"] = mj.resolution
    if mj.seconds:
        params["duration_seconds"] = mj.seconds
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


def _branches(job: Any) -> int:
    return 2 if job.guidance_scale > 1.0 else 1


# ------------------------------------------------------------------------------------------------- the plan


def choose_offload(spec: Any, job: Any, device_gb: float) -> tuple[str, dict[str, float], float]:
    """``none`` where the memory plan's peak with every component resident fits the device less the plan's reserve,
    else ``model``; with the plan's peaks under both and the usable memory."""
    from pipelines.planning.memory_plan import JobShape, load_components, peak_gb, reserve_gb

    usable = device_gb - reserve_gb(device_gb)
    comps = load_components(spec, spec.runtime)
    if comps is None:
        return "none", {}, round(usable, 1)
    shape = JobShape(job.gen_width, job.gen_height, job.num_frames, job.duration_seconds)
    peaks = {mode: round(peak_gb(spec, spec.runtime, comps, shape, mode), 1) for mode in ("none", "model")}
    return ("none" if peaks["none"] <= usable else "model"), peaks, round(usable, 1)


def plan_jobs(catalog: Any, selected: list[ModelJob], device: str, *, backends: bool) -> list[JobPlan]:
    """Each selected job's offload and phase estimates, at full size on ``device`` (``PLAN_DEVICE`` off CUDA)."""
    from pipelines.planning.memory_plan import GPU_CLASSES, device_memory_gb
    from pipelines.planning.mfu import peak_tflops
    from scripts.bench_backends import forwards

    on_gpu = device if device.startswith("cuda") else "cuda"  # the dry run plans the device command's run
    rate_tflops = (peak_tflops(device) or PLAN_PEAK_TFLOPS) * MFU
    device_gb = device_memory_gb(device) or GPU_CLASSES[PLAN_DEVICE]
    plans = []
    for mj in selected:
        first = _job(catalog, mj, mj.variants[0], dry_run=False)
        estimate = Estimate(
            forward_s=mj.forward_pflops * 1e3 / rate_tflops,
            refine_s=mj.refine_pflops * 1e3 / rate_tflops,
            other_s=mj.other_s,
            build_s=mj.build_s,
        )
        phases = {"build": mj.build_s}
        phases[f"{mj.variants[0]}, {mj.warmup}+{mj.timed} steps"] = estimate.run(mj.warmup + mj.timed, _branches(first))
        for variant in mj.variants[1:]:
            job = _job(catalog, mj, variant, dry_run=False)
            phases[f"{variant}, {job.steps} steps"] = estimate.run(job.steps, _branches(job))
        if mj.image_steps is not None:
            phases[f"{mj.variants[0]} {IMAGE_MODE}, {mj.image_steps} steps"] = estimate.run(
                mj.image_steps, _branches(first)
            )
        if backends and mj.backends:
            phases["backends"] = forwards(on_gpu) * estimate.forward_s + mj.build_s
        offload, peaks, usable = choose_offload(catalog.models[mj.model], first, device_gb)
        size = f"{first.gen_width}x{first.gen_height}x{first.num_frames}"
        start = mj.build_s + estimate.run(mj.warmup + 1, _branches(first))
        plans.append(JobPlan(mj, size, offload, peaks, usable, estimate, phases, start))
    return plans


def _plan_record(plans: list[JobPlan], deadline_s: float, device: str) -> dict[str, Any]:
    from pipelines.planning.memory_plan import GPU_CLASSES, device_memory_gb
    from pipelines.planning.mfu import peak_tflops

    rule = (
        f"each job's budget: the time left when it starts x its estimate / the estimates of the jobs not yet run; "
        f"estimates: denoiser FLOPs at {MFU:.0%} MFU plus assumed build, text encode and decode"
    )
    memory = device_memory_gb(device)
    jobs, rest = [], sum(p.estimate_s for p in plans)
    for p in plans:
        jobs.append(
            {
                "key": p.job.key,
                "model": p.job.model,
                "size": p.size,
                "offload": p.offload,
                "plan_peak_gb": p.peak_gb,
                "usable_gb": p.usable_gb,
                "phases_s": {k: round(v, 1) for k, v in p.phases.items()},
                "estimate_s": round(p.estimate_s, 1),
                "budget_s": round(deadline_s * p.estimate_s / rest, 1),  # as given when every job before used its own
                "backends": "backends" in p.phases,
            }
        )
    return {
        "rule": rule,
        "mfu": MFU,
        "peak_tflops": peak_tflops(device) or PLAN_PEAK_TFLOPS,
        "memory_gb": round(memory or GPU_CLASSES[PLAN_DEVICE], 1),
        "memory_of": "the device" if memory else PLAN_DEVICE,
        "jobs": jobs,
    }


# ------------------------------------------------------------------------------------------------- the run


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

    diffusers.utils.logging.set_verbosity_error()  # not one "experimental feature" notice per backend switch
    deadline = Deadline(deadline_s)
    catalog = load_catalog()
    selected = [mj for mj in JOBS if jobs is None or mj.key in jobs or mj.model in jobs]
    results = Results(out, header(device, dry_run, deadline_s))
    results.data["scale"] = ("shallow" if shallow else "tiny") if dry_run else "full"
    plans = plan_jobs(catalog, selected, device, backends=backends)
    results.data["plan"] = _plan_record(plans, deadline_s, device)
    results.write()
    print(plan_table(results.data), flush=True)
    for i, plan in enumerate(plans):
        given = budget(deadline.left(), plans[i:])
        job_deadline = deadline if dry_run else deadline.within(given)  # the dry run reports budgets only
        ctx = {"device": device, "deadline": job_deadline, "spec": catalog.models[plan.job.model], "dry_run": dry_run}
        ctx |= {"shallow": shallow, "estimate": plan.estimate, "offload": plan.offload}
        started = time.monotonic()
        _run_job(ctx, catalog, plan, results)
        used = round(time.monotonic() - started, 1)
        results.data["plan"]["jobs"][i] |= {"budget_given_s": round(given, 1), "used_s": used}
        results.write()
    results.data["elapsed_s"] = round(deadline.elapsed(), 1)
    results.data["finished"] = True
    results.write()
    print(table(results.data))
    return results.data


def _run_job(ctx: dict[str, Any], catalog: Any, plan: JobPlan, results: Results) -> None:
    """One model: built when its build and first run fit its budget, then its runs and (on one job) the backends;
    a failure (out of memory, a kernel) is recorded and costs the other jobs nothing but its own time."""
    from scripts.bench_backends import compare

    mj = plan.job
    if not _fits(ctx, mj.key, plan.start_s, results):
        return
    rm = None
    try:
        rm = build_model(ctx, mj, results)
        captured = _run_variants(ctx, catalog, rm, mj, results)
        _run_image(ctx, catalog, rm, mj, results)
        if "backends" in plan.phases and captured is not None:
            compare(ctx, rm, mj, captured, results)
    except DeadlineReached as e:
        results.drop(mj.key, f"cut: {e}")
    except Exception as e:  # one model's failure must not cost the others
        results.drop(mj.key, f"error: {type(e).__name__}: {str(e)[:400]}")
        traceback.print_exc(file=sys.stderr)
    finally:
        if rm is not None:
            rm.adapter.unload()
        del rm
        free_memory(ctx["device"])


def _fits(ctx: dict[str, Any], what: str, need_s: float, results: Results) -> bool:
    """Whether a phase estimated at ``need_s`` fits the job's time left; when not, it is dropped, saying so."""
    deadline = ctx["deadline"]
    if ctx["dry_run"] or deadline.fits(need_s):
        return True
    results.drop(what, f"deadline: {max(deadline.left(), 0):.0f} s left of its budget, needs ~{need_s:.0f}")
    return False


def build_model(ctx: dict[str, Any], mj: ModelJob, results: Results) -> Any:
    """The production adapter over random full-size components (tiny ones in the dry run), timed, with the offload
    the plan chose; what it was built with (offload, dtypes, attention processors) recorded."""
    from scripts.random_pipelines import random_adapter

    device = ctx["device"]
    variants = [("text_to_video", v) for v in mj.variants]
    if mj.image_steps is not None:
        variants.append((IMAGE_MODE, mj.variants[0]))
    synchronize(device)
    started = time.perf_counter()
    scale = ("shallow" if ctx.get("shallow") else "tiny") if ctx["dry_run"] else "full"
    rm = random_adapter(ctx["spec"], device=device, variants=variants, scale=scale, offload=ctx["offload"])
    warm_libraries(device)
    synchronize(device)
    ctx["dtypes"] = component_dtypes(rm.adapter)
    processors = {
        name: dict(Counter(type(p).__name__ for p in getattr(module, "attn_processors", {}).values()))
        for name in rm.denoisers
        if (module := getattr(rm.adapter.pipe, name, None)) is not None
    }
    results.data.setdefault("builds", {})[mj.model] = {
        "build_s": round(time.perf_counter() - started, 2),
        "weights_gb": round(rm.weight_bytes / 1e9, 2),
        "offload": ctx["offload"],
        "profile": rm.profile.model_dump(exclude={"notes"}),
        "dtypes": ctx["dtypes"],
        "attention_processors": processors,
    }
    results.write()
    return rm


def _add_run(ctx: dict[str, Any], rm: Any, results: Results, entry: dict[str, Any]) -> None:
    """A run's entry with its components' dtype changes since the build (each one a failure)."""
    entry["dtype_changes"] = dtype_changes(ctx["dtypes"], component_dtypes(rm.adapter))
    for component, change in entry["dtype_changes"].items():
        results.fail(entry["job"], f"{component} dtype changed: {change}")
    results.add_job(entry)


def _run_variants(ctx: dict[str, Any], catalog: Any, rm: Any, mj: ModelJob, results: Results) -> Any:
    """The model's variants in order: the first step by step (its call captured), the rest end to end."""
    captured = None
    for i, variant in enumerate(mj.variants):
        job = _job(catalog, mj, variant, ctx["dry_run"])
        label, branches = job_label(mj.model, job), _branches(job)
        if i > 0:
            if _fits(ctx, label, ctx["estimate"].run(job.steps, branches), results):
                _add_run(ctx, rm, results, measure_end_to_end(ctx, rm, mj, job))
            continue
        timed = _timed_steps(ctx, mj, branches)
        if not _fits(ctx, label, ctx["estimate"].run(mj.warmup + max(timed, 1), branches), results):
            return None
        entry, captured = measure_steps(ctx, rm, replace(mj, timed=timed), job)
        _add_run(ctx, rm, results, entry)
        if "cut" in entry:
            raise DeadlineReached(entry["cut"])
        ctx["estimate"] = ctx["estimate"].measured(entry, mj.warmup + timed, branches)
    return captured


def _timed_steps(ctx: dict[str, Any], mj: ModelJob, branches: int) -> int:
    """As many timed steps (up to ``mj.timed``) as the job's time left holds with the warm-up and a decode; 0 when
    not even one fits."""
    if ctx["dry_run"]:
        return mj.timed
    left = ctx["deadline"].left()
    fitting = [t for t in range(1, mj.timed + 1) if ctx["estimate"].run(mj.warmup + t, branches) <= left]
    return max(fitting, default=0)


def _run_image(ctx: dict[str, Any], catalog: Any, rm: Any, mj: ModelJob, results: Results) -> None:
    """image_to_video of the first variant, end to end at ``image_steps`` steps, on an image made here."""
    if mj.image_steps is None:
        return
    job = _job(catalog, mj, mj.variants[0], ctx["dry_run"], mode=IMAGE_MODE)
    job = job.model_copy(update={"steps": mj.image_steps})
    label = job_label(mj.model, job)
    if not _fits(ctx, label, ctx["estimate"].run(job.steps, _branches(job)), results):
        return
    try:
        entry = measure_end_to_end(ctx, rm, mj, job, image=input_image(job.gen_width, job.gen_height))
    except DeadlineReached:
        raise
    except Exception as e:  # the mode's own failure: the text_to_video results stand
        results.drop(label, f"error: {type(e).__name__}: {str(e)[:400]}")
        traceback.print_exc(file=sys.stderr)
        return
    _add_run(ctx, rm, results, entry)


def input_image(width: int, height: int) -> Any:
    """A smooth colour pattern (photo-like, not noise) at 4:3, fitted to ``width`` x ``height`` as the worker fits an
    input image (center crop to the aspect, then resize)."""
    import numpy as np
    from PIL import Image

    from worker.input_image import fit_image

    y, x = np.mgrid[0:480, 0:640] / 640
    rgb = np.stack([np.sin(6 * x), np.cos(5 * y), np.sin(4 * (x + y) + 1.7)], axis=-1)
    return fit_image(Image.fromarray(((rgb * 0.5 + 0.5) * 255).astype(np.uint8)), width, height)

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
import statistics
import subprocess
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.bench_gpu_report import table, targets

__all__ = ["JOBS", "DeadlineReached", "ModelJob", "run"]

MIN_MODEL_S = 60.0  # on a GPU, a model is not started with less than this left (build + a step + decode)


class DeadlineReached(Exception):
    """Raised from a step callback when the run's time is up: the adapter's loop stops there."""


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


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.started = time.monotonic()
        self.end = self.started + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def check(self) -> None:
        if self.left() <= 0:
            raise DeadlineReached(f"deadline reached after {self.elapsed():.0f} s")


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


# ------------------------------------------------------------------------------------------------- helpers


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gb(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated(device) / 1e9, 2) if device.startswith("cuda") else None


def _free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


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


class _TextClock:
    """Device time spent in the text encoders' forwards (hooks synchronise around each call)."""

    def __init__(self, modules: list[Any], device: str) -> None:
        self.modules, self.device, self.seconds, self.handles = modules, device, 0.0, []
        self._started = 0.0

    def __enter__(self) -> _TextClock:
        def before(*_: Any) -> None:
            _sync(self.device)
            self._started = time.perf_counter()

        def after(*_: Any) -> None:
            _sync(self.device)
            self.seconds += time.perf_counter() - self._started

        for m in self.modules:
            self.handles += [m.register_forward_pre_hook(before), m.register_forward_hook(after)]
        return self

    def __exit__(self, *_: Any) -> None:
        for h in self.handles:
            h.remove()


class _StepClock:
    """The adapter's ``on_step``: each step timed to its end on the device, the FLOPs recorded up to it, the
    deadline checked (raising stops the loop), and the first denoiser call after the warm-up captured."""

    def __init__(self, device: str, flops: Any, deadline: Deadline, capture_after: int | None) -> None:
        self.device, self.flops, self.deadline = device, flops, deadline
        self.stamps: list[float] = []
        self.snaps: list[Counter[Any]] = []
        self.capture_after = capture_after
        self.captured: Any = None
        self.started = 0.0

    def start(self) -> None:
        _sync(self.device)
        self.started = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        _sync(self.device)
        self.stamps.append(time.perf_counter())
        self.snaps.append(self.flops.snapshot())
        self.deadline.check()

    def pre_hook(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        from scripts.bench_backends import clone_inputs

        if self.captured is None and self.capture_after is not None and len(self.stamps) == self.capture_after:
            self.captured = clone_inputs(args, kwargs)

    def intervals(self) -> list[float]:
        return [b - a for a, b in zip([self.started, *self.stamps], self.stamps, strict=False)]

    def step_flops(self, denoiser: Any) -> tuple[list[float], str]:
        """FLOPs of each step's denoiser calls, counted on meta copies; a denoiser whose forward branches on its
        inputs' values (HunyuanVideo 1.5 gathers its text tokens by mask) cannot run on meta: then the captured
        call is counted once on the device and every call of a step is taken to cost as much."""
        pairs = list(zip([Counter(), *self.snaps], self.snaps, strict=False))
        try:
            return [self.flops.total(b - a) for a, b in pairs], "meta"
        except RuntimeError:
            if self.captured is None:
                raise
            per_call = _counted_on_device(denoiser, self.captured)
            return [per_call * sum((b - a).values()) for a, b in pairs], "one captured call counted on the device"


def _warm_libraries(device: str) -> None:
    """cuBLAS and cuDNN handles are made at a process's first matmul and convolution: made here, so the first
    text encode and decode are not charged for them."""
    import torch

    if device.startswith("cuda"):
        x = torch.ones(1, 8, 8, 8, device=device, dtype=torch.bfloat16)
        torch.nn.functional.conv2d(x @ x, torch.ones(8, 8, 1, 1, device=device, dtype=torch.bfloat16))


def _counted_on_device(module: Any, captured: Any) -> float:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    args, kwargs = captured
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(*args, **kwargs)
    return float(counter.get_total_flops())


def _consume(media: Any) -> int:
    return sum(len(chunk) for chunk in media.chunks)


def _plan_peak(spec: Any, profile: Any, job: Any) -> dict[str, Any]:
    from pipelines.planning.memory_plan import JobShape, load_components, peak_gb

    comps = load_components(spec, profile)
    if comps is None:
        return {}
    shape = JobShape(job.gen_width, job.gen_height, job.num_frames, job.duration_seconds)
    return {"plan_peak_gb": round(peak_gb(spec, profile, comps, shape, "none"), 2)}


# ------------------------------------------------------------------------------------------------- phases


def _groups(spec: Any, adapter: Any, job: Any, steps_run: int) -> tuple[list[str], dict[str, int]]:
    """Each run step's group (an expert, a stage, or ``denoise``) and how many steps the recipe runs in each."""
    pipe = adapter.pipe
    if spec.family == "ltx2" and spec.two_stage is not None:
        stage1 = steps_run - len(spec.two_stage.refine_sigmas)
        labels = ["stage 1"] * stage1 + ["stage 2"] * (steps_run - stage1)
        return labels, {"stage 1": job.steps, "stage 2": len(spec.two_stage.refine_sigmas)}
    if spec.family == "wan" and getattr(pipe, "transformer_2", None) is not None:
        from pipelines.families.wan import wan_expert

        labels = [str(wan_expert(pipe, t)) for t in pipe.scheduler.timesteps[:steps_run]]
        recipe = type(pipe.scheduler).from_config(pipe.scheduler.config)
        recipe.set_timesteps(job.steps)
        return labels, dict(Counter(str(wan_expert(pipe, t)) for t in recipe.timesteps))
    return ["denoise"] * steps_run, {"denoise": job.steps}


def measure_steps(ctx: dict[str, Any], rm: Any, mj: ModelJob, job: Any) -> tuple[dict[str, Any], Any]:
    """The first variant: warm-up + timed steps through ``adapter.denoise``, then ``decode``; the figures
    extrapolated to the recipe's steps. Returns the entry and the captured denoiser call."""
    from pipelines.planning.flops import DenoiseFlops, achieved

    device, deadline, adapter = ctx["device"], ctx["deadline"], rm.adapter
    run_job = job.model_copy(update={"steps": mj.warmup + mj.timed})
    flops = DenoiseFlops()
    clock = _StepClock(device, flops, deadline, capture_after=mj.warmup)
    denoiser = getattr(adapter.pipe, rm.denoisers[0])
    hook = denoiser.register_forward_pre_hook(clock.pre_hook, with_kwargs=True)
    texts = [m for n in rm.text_encoders if (m := getattr(adapter.pipe, n, None)) is not None]
    _reset_peak(device)
    cut: DeadlineReached | None = None
    try:
        with _TextClock(texts, device) as text, flops.recording(adapter.pipe):
            clock.start()
            latents = adapter.denoise(run_job, clock)
    except DeadlineReached as e:  # the steps done still tell s/step: kept when one past the warm-up ran
        if len(clock.stamps) <= mj.warmup:
            raise
        cut = e
    finally:
        hook.remove()
    peak_denoise = _peak_gb(device)
    decode_s, frames = 0.0, 0
    if cut is None:
        _reset_peak(device)
        started = time.perf_counter()
        frames = _consume(adapter.decode(latents, run_job))
        _sync(device)
        decode_s = time.perf_counter() - started
    intervals, (step_flops, counted) = clock.intervals(), clock.step_flops(denoiser)
    labels, recipe = _groups(ctx["spec"], adapter, job, len(intervals))
    groups: dict[str, Any] = {}
    denoise_s = 0.0
    for label, count in recipe.items():
        mine = [i for i, lab in enumerate(labels) if lab == label]
        timed = [i for i in mine if i >= mj.warmup] or mine  # a group whose only step was the warm-up
        if not timed:
            continue
        s_step = statistics.median(intervals[i] for i in timed)
        flops_step = statistics.median(step_flops[i] for i in timed)
        tflops, mfu = achieved(flops_step, s_step, device)
        full = sum(intervals[i] for i in mine) if len(mine) == count else s_step * count
        denoise_s += full
        groups[label] = {
            "s_per_step": round(s_step, 4),
            "steps_timed": len(timed),
            "recipe_steps": count,
            "pflops_per_step": round(flops_step / 1e15, 4),
            "tflops": round(tflops, 1),
            "mfu": None if mfu is None else round(mfu, 3),
        }
    entry = {
        "job": f"{mj.model} {mj.variants[0]}",
        "size": f"{job.gen_width}x{job.gen_height}x{job.num_frames}",
        "cfg": job.guidance_scale > 1.0,
        "frames_decoded": frames,
        "text_encode_s": round(text.seconds, 3),
        "step_s": [round(s, 4) for s in intervals],
        "groups": groups,
        "flops_counted": counted,
        "decode_s": round(decode_s, 3),
        "e2e_s": round(text.seconds + denoise_s + decode_s, 2),
        "peak_gb": max((p for p in (peak_denoise, _peak_gb(device)) if p is not None), default=None),
        **_plan_peak(ctx["spec"], rm.profile, job),
    }
    if mj.target_steps and len(groups) == 1:
        only = next(iter(groups.values()))
        entry["e2e_s_at_target_steps"] = round(text.seconds + only["s_per_step"] * mj.target_steps + decode_s, 2)
        entry["target_steps"] = mj.target_steps
    if cut is not None:  # no decode: the end to end figures would be short of it
        entry |= {"cut": str(cut), "decode_s": None, "e2e_s": None, "e2e_s_at_target_steps": None}
    return entry, clock.captured


def measure_end_to_end(ctx: dict[str, Any], rm: Any, mj: ModelJob, job: Any) -> dict[str, Any]:
    """A whole job (its real step count) through ``denoise`` and ``decode``, timed outright."""
    from pipelines.planning.flops import DenoiseFlops

    device, adapter = ctx["device"], rm.adapter
    flops = DenoiseFlops()
    clock = _StepClock(device, flops, ctx["deadline"], capture_after=None)
    texts = [m for n in rm.text_encoders if (m := getattr(adapter.pipe, n, None)) is not None]
    _reset_peak(device)
    with _TextClock(texts, device) as text:
        clock.start()
        latents = adapter.denoise(job, clock)
        denoised = time.perf_counter()
        frames = _consume(adapter.decode(latents, job))
        _sync(device)
    ended = time.perf_counter()
    intervals = clock.intervals()
    return {
        "job": f"{mj.model} {job.variant}",
        "size": f"{job.gen_width}x{job.gen_height}x{job.num_frames}",
        "cfg": job.guidance_scale > 1.0,
        "frames_decoded": frames,
        "text_encode_s": round(text.seconds, 3),
        "step_s": [round(s, 4) for s in intervals],
        "groups": {"denoise": {"s_per_step": round(statistics.median(intervals[1:] or intervals), 4)}},
        "decode_s": round(ended - denoised, 3),
        "e2e_s": round(ended - clock.started, 2),
        "e2e_measured": True,
        "peak_gb": _peak_gb(device),
    }


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
            _free(device)
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
    _sync(device)
    started = time.perf_counter()
    scale = ("shallow" if ctx.get("shallow") else "tiny") if ctx["dry_run"] else "full"
    rm = random_adapter(ctx["spec"], device=device, variants=variants, scale=scale)
    _warm_libraries(device)
    _sync(device)
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

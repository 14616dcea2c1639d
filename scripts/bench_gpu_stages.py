"""The stages ``bench_gpu.py --random-weights`` times on one model (``scripts/bench_gpu_random.py`` runs them):
the first variant step by step through the production adapter's ``denoise`` and ``decode``, the others (and an
image_to_video run) end to end, with the clocks, FLOP records, deadlines and dtype records they share.

Each step is timed to its end on the device (the step callback synchronises); the text encoders' forwards are
timed by hooks; FLOPs are those of exactly the calls of each step (``pipelines.runtime.flops``). The deadline is
checked at every step end: raising from the step callback is the adapter's own cancel path, so a loop stops at
the step where time runs out, and the steps already done are kept. After every run each component's parameter
dtypes are read again: a component whose dtypes moved since the build (a cast in a pipeline built over the same
modules) is a failure the run reports.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scripts.bench_gpu_random import ModelJob

__all__ = [
    "Deadline",
    "DeadlineReached",
    "component_dtypes",
    "dtype_changes",
    "free_memory",
    "job_label",
    "measure_end_to_end",
    "measure_steps",
    "synchronize",
    "warm_libraries",
]


class DeadlineReached(Exception):
    """Raised from a step callback when the run's time is up: the adapter's loop stops there."""


class Deadline:
    def __init__(self, seconds: float, *, end: float | None = None) -> None:
        self.started = time.monotonic()
        self.end = self.started + seconds if end is None else min(end, self.started + seconds)

    def within(self, seconds: float) -> Deadline:
        """A deadline ``seconds`` from now, never past this one (a job's budget inside the run's deadline)."""
        return Deadline(seconds, end=self.end)

    def left(self) -> float:
        return self.end - time.monotonic()

    def fits(self, need_s: float) -> bool:
        return self.left() >= need_s

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def check(self) -> None:
        if self.left() <= 0:
            raise DeadlineReached(f"deadline reached after {self.elapsed():.0f} s")


# ------------------------------------------------------------------------------------------------- helpers


def synchronize(device: str) -> None:
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


def free_memory(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


class _TextClock:
    """Device time spent in the text encoders' forwards (hooks synchronise around each call)."""

    def __init__(self, modules: list[Any], device: str) -> None:
        self.modules, self.device, self.seconds = modules, device, 0.0
        self.handles: list[Any] = []
        self._started = 0.0

    def __enter__(self) -> _TextClock:
        def before(*_: Any) -> None:
            synchronize(self.device)
            self._started = time.perf_counter()

        def after(*_: Any) -> None:
            synchronize(self.device)
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
        synchronize(self.device)
        self.started = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        synchronize(self.device)
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


def warm_libraries(device: str) -> None:
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
    """The memory plan's peak for the job's full size under the offload the model was built with."""
    from pipelines.planning.memory_plan import JobShape, load_components, peak_gb

    comps = load_components(spec, profile)
    if comps is None:
        return {}
    shape = JobShape(job.gen_width, job.gen_height, job.num_frames, job.duration_seconds)
    return {"plan_peak_gb": round(peak_gb(spec, profile, comps, shape, profile.offload), 2)}


def component_dtypes(adapter: Any) -> dict[str, dict[str, int]]:
    """Every module of the adapter's pipelines (LTX-2's upsampler pipeline too), by component name: how many
    parameters it holds in each dtype."""
    import torch

    out: dict[str, dict[str, int]] = {}
    seen: set[int] = set()
    for pipe in (adapter.pipe, getattr(adapter, "upsample_pipe", None)):
        for name, module in (pipe.components if pipe is not None else {}).items():
            if not isinstance(module, torch.nn.Module) or id(module) in seen:
                continue
            seen.add(id(module))
            counts: Counter[str] = Counter()
            for param in module.parameters():
                counts[str(param.dtype).removeprefix("torch.")] += param.numel()
            out[name] = dict(sorted(counts.items()))
    return out


def dtype_changes(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, str]:
    """Each component whose parameter dtypes differ between two ``component_dtypes`` records: "before -> after"."""

    def text(counts: dict[str, int] | None) -> str:
        return ", ".join(f"{dtype} {n:,}" for dtype, n in (counts or {}).items()) or "absent"

    names = sorted(set(before) | set(after))
    return {n: f"{text(before.get(n))} -> {text(after.get(n))}" for n in names if before.get(n) != after.get(n)}


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
    from pipelines.planning.mfu import achieved
    from pipelines.runtime.flops import DenoiseFlops

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
        synchronize(device)
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
        "job": job_label(mj.model, job),
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


def job_label(model: str, job: Any) -> str:
    """How a run is named in the results: the model and variant, and the mode where it is not text_to_video."""
    return f"{model} {job.variant}" + ("" if job.mode == "text_to_video" else f" {job.mode}")


def measure_end_to_end(ctx: dict[str, Any], rm: Any, mj: ModelJob, job: Any, image: Any = None) -> dict[str, Any]:
    """A whole job (the step count it is given) through ``denoise`` and ``decode``, timed outright; ``image``:
    the input of an image_to_video job, already fitted to its generation size."""
    from pipelines.runtime.flops import DenoiseFlops

    device, adapter = ctx["device"], rm.adapter
    flops = DenoiseFlops()
    clock = _StepClock(device, flops, ctx["deadline"], capture_after=None)
    texts = [m for n in rm.text_encoders if (m := getattr(adapter.pipe, n, None)) is not None]
    conditioning = {} if image is None else {"image": image}
    _reset_peak(device)
    with _TextClock(texts, device) as text:
        clock.start()
        latents = adapter.denoise(job, clock, **conditioning)
        denoised = time.perf_counter()
        frames = _consume(adapter.decode(latents, job))
        synchronize(device)
    ended = time.perf_counter()
    intervals = clock.intervals()
    labels, _recipe = _groups(ctx["spec"], adapter, job, len(intervals))
    groups = {}
    for label in dict.fromkeys(labels):  # the first step's interval holds the text encode: left out where it can be
        mine = [s for i, (s, lab) in enumerate(zip(intervals, labels, strict=True)) if lab == label and i > 0]
        groups[label] = {"s_per_step": round(statistics.median(mine or intervals[:1]), 4)}
    return {
        "job": job_label(mj.model, job),
        "size": f"{job.gen_width}x{job.gen_height}x{job.num_frames}",
        "cfg": job.guidance_scale > 1.0,
        "frames_decoded": frames,
        "text_encode_s": round(text.seconds, 3),
        "step_s": [round(s, 4) for s in intervals],
        "groups": groups,
        "steps_run": len(intervals),
        "decode_s": round(ended - denoised, 3),
        "e2e_s": round(ended - clock.started, 2),
        "e2e_measured": True,
        "peak_gb": _peak_gb(device),
    }

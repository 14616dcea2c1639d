"""Every catalog job at full size on a CPU, every parameter a fake tensor: memory, FLOPs and dtypes as built.

The production adapter of each entry is assembled over random full-size components
(``pipelines.simulation.random_pipelines``: the adapter's own ``assemble``, the one ``load`` runs) with every
parameter made under ``FakeTensorMode``: a fake tensor has a shape, a dtype and a device but no storage, and
each op on it computes only the shape and dtype of its result. Small real tensors (tokenizer output, masks,
scheduler state, latents drawn from a seeded generator) stay real, so the pipelines' data-dependent branches
run as they do on a device; an op with a fake input runs fake. Then the adapter's own ``denoise`` (one step per
expert and per stage: ``SimJob.cut``) and ``decode`` run, and ``Recorder`` notes, per phase:

- live tensor bytes above the weights (every storage an op makes, until it is freed): the activation peak;
- the largest tensor (any of 2^31 elements or more is flagged: int32 index limits of CUDA kernels);
- each denoiser forward's FLOPs (``FlopCounterMode``), split into attention, linear and convolution.

Allocator fragmentation, cuBLAS/cuDNN workspaces and the CUDA context are not in the figures (the plan's
reserve holds them), and a CPU-only torch cannot make fake CUDA tensors, so kernel selection is not exercised.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.planning.fake_runtime import HostBoundary, fake_safe_moves, real_outputs
from pipelines.planning.op_stats import ForwardFlops, OpRecorder

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec
    from foundation.core.resolve import ResolvedJob

__all__ = ["INT32_ELEMENTS", "ForwardFlops", "JobResult", "SimJob", "result_from_json", "sim_jobs", "simulate_model"]

GB = 1e9
INT32_ELEMENTS = 2**31  # a tensor this large overflows the int32 indexing of many CUDA kernels
PROMPT = "a red fox running through fresh snow at dawn, cinematic, shallow depth of field"
DECODERS = ("vae", "audio_vae", "vocoder", "latent_upsampler", "diffusion_decoder")


@dataclass(frozen=True)
class SimJob:
    """One catalog job at the entry's largest size and longest duration."""

    model: str
    mode: str
    variant: str
    resolution: str
    ratio: str
    seconds: int

    @property
    def label(self) -> str:
        return f"{self.model} {self.mode} {self.variant} {self.resolution} {self.ratio} {self.seconds} s"


@dataclass
class JobResult:
    """What one simulated job showed, with the plan's figures beside it (filled by the caller)."""

    job: SimJob
    width: int = 0
    height: int = 0
    frames: int = 0
    params: int = 0
    weight_bytes: int = 0
    forwards: list[ForwardFlops] = field(default_factory=list)
    forward_calls: list[tuple[str, tuple[int, ...], int]] = field(default_factory=list)  # denoiser, shape, calls
    stages: list[tuple[int, int]] = field(default_factory=list)  # per stage: (steps run here, the job's steps)
    activation_bytes: dict[str, int] = field(default_factory=dict)  # phase -> live bytes above the weights
    largest: tuple[int, tuple[int, ...], str] = (0, (), "")  # elements, shape, op
    dtype_changes: list[str] = field(default_factory=list)
    host_shapes: list[tuple[int, ...]] = field(default_factory=list)  # what left for the host (shapes only)
    error: str | None = None
    decode_from: str = ""  # the job whose decode figures these are ("": its own)
    wall_s: float = 0.0
    plan_gb: dict[str, float] = field(default_factory=dict)  # phase -> the plan's peak (weights + activations)

    def job_flops(self) -> float:
        """The whole job's denoising FLOPs: each forward shape's FLOPs x its calls here, scaled from the steps
        run here to the job's own, stage by stage (the shapes of a denoiser appear in stage order)."""
        calls = {(name, shape): n for name, shape, n in self.forward_calls}
        seen: Counter[str] = Counter()
        total = 0.0
        for forward in self.forwards:
            stage = self.stages[min(seen[forward.denoiser], len(self.stages) - 1)]
            seen[forward.denoiser] += 1
            total += forward.total * calls.get((forward.denoiser, forward.shape), 0) * stage[1] / stage[0]
        return total

    def peak_gb(self, phase: str) -> float:
        """Weights plus the phase's activation peak, all resident (offload none), in GB."""
        return (self.weight_bytes + self.activation_bytes.get(phase, 0)) / GB


def result_from_json(data: dict[str, Any]) -> JobResult:
    """A ``JobResult`` from its ``dataclasses.asdict`` form (``genworker simulate --json``), tuples restored."""
    fields = {k: v for k, v in data.items() if k in JobResult.__dataclass_fields__}
    fields["job"] = SimJob(**data["job"])
    fields["forwards"] = [ForwardFlops(**{**f, "shape": tuple(f["shape"])}) for f in data["forwards"]]
    fields["forward_calls"] = [(name, tuple(shape), n) for name, shape, n in data["forward_calls"]]
    fields["stages"] = [tuple(stage) for stage in data["stages"]]
    fields["largest"] = (data["largest"][0], tuple(data["largest"][1]), data["largest"][2])
    fields["host_shapes"] = [tuple(shape) for shape in data["host_shapes"]]
    return JobResult(**fields)


def sim_jobs(spec: ModelSpec, *, resolution: str | None = None) -> list[SimJob]:
    """Every mode x variant of ``spec`` at its largest resolution (or ``resolution``), the ratio with the most
    pixels there, and its longest duration."""
    from foundation.core.resolve import generation_size

    resolution = resolution or max(spec.resolutions, key=lambda r: _pixels(spec, r, generation_size))
    ratio = max(spec.ratios, key=lambda q: _area(generation_size(spec, resolution, q)))
    seconds = max(spec.durations)
    return [
        SimJob(spec.id, mode, variant, resolution, ratio, seconds)
        for mode, mode_spec in spec.modes.items()
        for variant in mode_spec.variants
    ]


def _area(size: tuple[int, int]) -> int:
    return size[0] * size[1]


def _pixels(spec: ModelSpec, resolution: str, size_of: Any) -> int:
    return max(_area(size_of(spec, resolution, q)) for q in spec.ratios)


def simulate_model(spec: ModelSpec, jobs: list[SimJob], *, decode: bool = True) -> list[JobResult]:
    """Build ``spec``'s adapter once under fake tensors (every variant's LoRA on it, as ``load`` does) and run
    ``jobs`` on it in order, each job's dtypes compared with the build's. A build that fails fails every job."""
    from pipelines.simulation.random_pipelines import random_adapter

    sim_spec = _one_step_spec(spec)
    variants = sorted({(j.mode, j.variant) for j in jobs})
    try:
        with fake_safe_moves():
            model = random_adapter(sim_spec, device="cpu", variants=variants, offload="none", fake=True)
    except Exception as e:  # kept broad: the report says what failed, the sweep goes on
        return [JobResult(job, error=f"build: {type(e).__name__}: {e}") for job in jobs]
    adapter = model.adapter
    adapter.records_flops = False  # the recorder below counts the ops; the adapter's meta copies would add to them
    if getattr(adapter, "video_decoder", None) is not None:  # LTX-2.5's diffusion decoder: its CUDA path's tensors
        adapter.video_decoder.set_attn_processor(NattenShapedAttention())
    before = _dtypes(adapter.pipe)
    params = sum(t.numel() for t in _unique(adapter.pipe, parameters=True))
    weights = sum(t.numel() * t.element_size() for t in _unique(adapter.pipe, parameters=False))
    results: list[JobResult] = []
    for job in jobs:
        result = JobResult(job, params=params, weight_bytes=weights)
        key = _decode_key(adapter, spec, job)
        earlier = DECODES.get(key)  # a job whose decode stands for this one: same VAE, same latents
        _run(adapter, model, spec, job, result, decode=decode and earlier is None)
        result.dtype_changes = _changed(before, _dtypes(adapter.pipe))
        if earlier is not None and result.error is None:
            _reuse_decode(result, earlier)
        elif decode and result.error is None:
            DECODES[key] = result
        results.append(result)
    return results


# Decodes run in this process, by what decides them (``_decode_key``): a decode is minutes of CPU and the same for
# every variant, mode and model that shares the VAE, its dtype and tiling, the size and the frame count.
DECODES: dict[str, JobResult] = {}


class NattenShapedAttention:
    """In the simulation, what LTX-2.5's diffusion decoder holds on CUDA, where it runs on NATTEN's kernels
    (diffusers' ``LTX2VideoVaeNeighborhoodNattenProcessor``; ``pipelines/families/ltx2.py``): q, k and v made
    contiguous and an output like the query, no score matrix and no block mask. The neighborhood attention itself
    is not computed: NATTEN has no CPU path, FlexAttention's eager one (the CPU default) holds the dense scores,
    which CUDA never does, and only the denoisers' FLOPs are reported."""

    def __call__(self, attn: Any, hidden_states: Any, block_mask: Any = None) -> Any:
        import torch

        batch, frames, height, width, channels = hidden_states.shape
        qkv = [t.contiguous() for t in attn.project_qkv(hidden_states)]  # referenced through to_out, as there
        out = torch.empty_like(qkv[0])  # what the kernel writes
        return attn.to_out[0](out.reshape(batch, frames, height, width, channels))


def _decode_key(adapter: Any, spec: ModelSpec, job: SimJob) -> str:
    import json

    from foundation.core.resolve import frames_for, generation_size

    vae = getattr(adapter, "video_decoder", None) or adapter.pipe.vae  # LTX-2.5 decodes with its diffusion decoder
    size = generation_size(spec, job.resolution, job.ratio)
    frames = frames_for(job.seconds * spec.fps, spec.frame_rule.multiple, spec.frame_rule.offset)
    config = json.dumps(dict(vae.config), sort_keys=True, default=str)
    return json.dumps([type(vae).__name__, config, str(vae.dtype), bool(vae.use_tiling), size, frames, spec.audio])


def _reuse_decode(result: JobResult, decoded: JobResult) -> None:
    """An earlier job's decode figures for a job whose decode is the same (``DECODES``)."""
    result.activation_bytes["decode"] = decoded.activation_bytes.get("decode", 0)
    result.host_shapes = [*decoded.host_shapes, *result.host_shapes]
    result.decode_from = decoded.job.label
    if decoded.largest[0] > result.largest[0]:
        result.largest = decoded.largest


def _one_step_spec(spec: ModelSpec) -> ModelSpec:
    """``spec`` with LTX-2's refinement cut to its first sigma: one step per stage (stage 1's steps are the job's)."""
    recipe = spec.two_stage
    if recipe is None:
        return spec
    return spec.model_copy(update={"two_stage": recipe.model_copy(update={"refine_sigmas": recipe.refine_sigmas[:1]})})


def _run(adapter: Any, model: Any, spec: ModelSpec, job: SimJob, result: JobResult, *, decode: bool) -> None:
    started = time.perf_counter()
    try:
        resolved = _resolved(spec, job)
        result.width, result.height, result.frames = resolved.gen_width, resolved.gen_height, resolved.num_frames
        cut = _cut(adapter, resolved)
        result.stages = _stages(spec, resolved, cut)
        image = _image(resolved) if job.mode == "image_to_video" else None
        recorder = OpRecorder()
        # Outside the fake mode: small real tensors stay real; ops on the fake parameters run fake by themselves.
        hooks = recorder.phases(adapter.pipe, encoders=model.text_encoders, denoisers=model.denoisers)
        # An image encoder's output is real (``real_outputs``): HunyuanVideo 1.5 reads its values to tell the mode.
        image_encoder = getattr(adapter.pipe, "image_encoder", None) if image is not None else None
        with fake_safe_moves(), recorder.recording(), hooks, real_outputs(image_encoder):
            recorder.phase = "denoise"
            latents = adapter.denoise(cut, lambda step, total: None, image=image)
            if decode:
                recorder.phase = "decode"
                # A waveform leaves for the host at once (frames lazily, never here); the boundary costs every
                # torch call a hop, so it is only there for a model with audio.
                with HostBoundary() if spec.audio else contextlib.nullcontext() as host:
                    media = adapter.decode(latents, cut)
                result.host_shapes += [(media.num_frames, media.height, media.width, 3), *(host.shapes if host else [])]
            recorder.phase = ""
        result.activation_bytes = dict(recorder.peaks)
        result.largest = recorder.largest
        result.forwards = recorder.forwards
        result.forward_calls = [(name, shape, n) for (name, shape), n in recorder.calls.items()]
    except Exception as e:  # kept broad: the report says what failed, the sweep goes on
        result.error = f"{type(e).__name__}: {e}"
    result.wall_s = time.perf_counter() - started


def _resolved(spec: ModelSpec, job: SimJob) -> ResolvedJob:
    """The job as the API resolves it: the entry's defaults, this size and duration, audio where offered."""
    from foundation.core.catalog import Catalog
    from foundation.core.contract import CreateRequest, StoredImage
    from foundation.core.resolve import generation_size, resolve

    params: dict[str, Any] = {**spec.defaults, "seed": 0, "prompt_extend": False}
    params |= {"resolution": job.resolution, "ratio": job.ratio, "duration_seconds": job.seconds}
    if spec.audio:
        params["audio"] = True
    inputs: dict[str, Any] = {"prompt": PROMPT}
    image = None
    if job.mode == "image_to_video":
        width, height = generation_size(spec, job.resolution, job.ratio)
        inputs["image_url"] = "https://example.invalid/input.png"
        image = StoredImage(key="sim", content_type="image/png", bytes=1, sha256="0" * 64, width=width, height=height)
    request = CreateRequest.model_validate(
        {"model": spec.id, "mode": job.mode, "variant": job.variant, "parameters": params, "input": inputs}
    )
    return resolve(request, Catalog(models={spec.id: spec}), image=image)[0]


def _cut(adapter: Any, job: ResolvedJob) -> ResolvedJob:
    """``job`` with its schedule cut to one step per expert: one step, or for two experts two steps with the
    boundary between them (where the switch falls does not change what either expert computes per step)."""
    update: dict[str, Any] = {"steps": 1}
    pipe = adapter.pipe
    if getattr(pipe, "transformer_2", None) is not None and hasattr(adapter, "_base_scheduler_config"):
        scheduler = type(pipe.scheduler).from_config(adapter._base_scheduler_config, **_shift(adapter, job))
        scheduler.set_timesteps(2)
        first, second = (float(t) for t in scheduler.timesteps[:2])
        ratio = (first + second) / 2 / scheduler.config.num_train_timesteps
        update = {"steps": 2, "pipeline_kwargs": {**job.pipeline_kwargs, "boundary_ratio": ratio}}
    return job.model_copy(update=update)


def _stages(spec: ModelSpec, job: ResolvedJob, cut: ResolvedJob) -> list[tuple[int, int]]:
    """(steps run in the cut job, steps of the real job) per stage. LTX-2's two stages: stage 1 runs the job's
    steps or the distilled sigmas (which no step count cuts), the refinement one of its sigmas here
    (``_one_step_spec``)."""
    recipe = spec.two_stage
    if recipe is None:
        return [(cut.steps, job.steps)]
    from diffusers.pipelines.ltx2.utils import DISTILLED_SIGMA_VALUES

    distilled = len(DISTILLED_SIGMA_VALUES)
    first = (distilled, distilled) if job.pipeline_kwargs.get("distilled") else (cut.steps, job.steps)
    return [first, (1, len(recipe.refine_sigmas))]


def _shift(adapter: Any, job: ResolvedJob) -> dict[str, float]:
    config = adapter._base_scheduler_config
    if job.flow_shift is None:
        return {}
    return {"flow_shift": job.flow_shift} if "flow_shift" in config else {"shift": job.flow_shift}


def _image(job: ResolvedJob) -> Any:
    """The input image at the generation size, as the worker hands it over (fitted, RGB)."""
    from PIL import Image

    return Image.new("RGB", (job.gen_width, job.gen_height), (128, 96, 64))


def _unique(pipe: Any, *, parameters: bool) -> Iterator[Any]:
    seen: set[int] = set()
    for module in _modules(pipe).values():
        tensors = module.parameters() if parameters else [*module.parameters(), *module.buffers()]
        for tensor in tensors:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                yield tensor


def _modules(pipe: Any) -> dict[str, Any]:
    import torch

    return {n: m for n, m in pipe.components.items() if isinstance(m, torch.nn.Module)}


def _dtypes(pipe: Any) -> dict[str, Counter[str]]:
    """Per component, elements by floating dtype (a component whose weights turn float32 shows here)."""
    out: dict[str, Counter[str]] = {}
    for name, module in _modules(pipe).items():
        counts: Counter[str] = Counter()
        for tensor in module.parameters():
            counts[str(tensor.dtype).removeprefix("torch.")] += tensor.numel()
        out[name] = counts
    return out


def _changed(before: dict[str, Counter[str]], after: dict[str, Counter[str]]) -> list[str]:
    return [
        f"{name}: {dict(before.get(name, {}))} -> {dict(counts)}"
        for name, counts in after.items()
        if counts != before.get(name)
    ]

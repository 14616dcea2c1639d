"""Regional compile without recompiles during jobs (a runtime profile's ``compile``).

``compile_blocks`` compiles the repeated transformer blocks lazily: the first call of each new input shape, and of
each new kind of graph, compiles. What makes a new graph kind is whatever a block's forward branches on: a LoRA
switched on (peft's layers run their adapters) and which one, CFG where a family batches it (LTX-2), and the family
options a variant passes. Left alone, a worker compiles inside its first jobs of each size and each such variant
(seconds to minutes on a GPU). So a compiled model is warmed at load (``warm_up``) over ``warmup_plan``: for each mode
(an image mode with a blank image of the generation size) and each distinct graph kind among the hosted variants, one
denoise per shape of a set that varies each latent dimension (width, height, frames) once, so dynamo's automatic
dynamic shapes settle on a graph that serves every size the model advertises. A variant of a two-expert model
(``boundary_ratio``: Wan 2.2 A14B) runs its own schedule until the low-noise expert (``transformer_2``) has run, the
fewest steps that reach it, then stops (``WarmupDone``); any other runs one step. A model's warm-up therefore costs
about (graph kinds x shapes) denoising steps, a few more for a second expert: each kind compiles once or twice, and
the steps are what a GPU spends.

Variants that differ only in steps, shift, sampler or guidance strength share their graphs, and so do a variant's
cache recipe and the lack of one: diffusers' cache hooks wrap a block's compiled forward rather than being compiled
into it (dynamo cannot trace a hooked forward: a block compiled whole, ``nn.Module.compile``, fails every cached job).
The plan still runs each cache recipe, so nothing a job does is first seen in a job.

During a job the worker compares ``compiled_graphs()`` before and after (``genworker_compiles_in_jobs_total``): a
compile is a metric and a warning, never a failure. A block that dynamo cannot compile (``fullgraph`` refuses a graph
break, or more graphs than ``RECOMPILE_LIMIT``) makes ``warm_up`` fall back to eager for the model, with a log line,
instead of failing jobs later.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from foundation.core.catalog import mode_inputs
from pipelines.errors import ModelLoadError, WarmupDone

if TYPE_CHECKING:
    from foundation.core.catalog import Catalog, ModelSpec, VariantSpec
    from foundation.core.resolve import ResolvedJob

__all__ = [
    "GraphKind",
    "WarmupJob",
    "compile_blocks",
    "compiled_graphs",
    "graph_kind",
    "run_warmup_job",
    "warm_up",
    "warmup_plan",
]

log = logging.getLogger("genworker.pipelines.compile")

# The denoisers a compiled model may have: the transformer, and Wan 2.2 A14B's low-noise expert.
DENOISERS = ("transformer", "transformer_2")
# Graphs dynamo keeps per code object. One code object (a block class's forward) serves every graph kind of every
# compiled model of that class in the process, each kind as a static then a dynamic graph: dynamo's default of 8 is
# fewer than tiny LTX-2 alone needs (two modes, two stages, the LoRA on and off), and under fullgraph a model over
# the limit fails its job (its warm-up, here: FailOnRecompileLimitHit).
RECOMPILE_LIMIT = 64
# Each compiled denoiser's block forwards, kept beside the module (weakly: they go with it) rather than stamped on it.
_COMPILED_FORWARDS: weakref.WeakKeyDictionary[Any, list[_CompiledForward]] = weakref.WeakKeyDictionary()


def compiled_graphs() -> int:
    """Graphs dynamo compiled in this process so far (its own counter)."""
    from torch._dynamo.utils import counters  # noqa: PLC2701 - torch has no public count of compiled graphs

    return int(counters["stats"]["unique_graphs"])


# ------------------------------------------------------------------------------------------------ compiling


class _CompiledForward:
    """A block's forward, compiled; ``eager`` switches it back in place (hooks around it may hold a reference)."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        import torch

        functools.update_wrapper(self, forward)  # the signature and name, which diffusers' hooks copy
        self.forward = forward
        self.compiled = torch.compile(forward, fullgraph=True)
        self.eager = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return (self.forward if self.eager else self.compiled)(*args, **kwargs)


def compile_blocks(models: list[Any]) -> None:
    """Regional compilation: on each repeated block (a class the model names in ``_repeated_blocks``) its own
    ``forward`` is replaced by its compiled self, so one compiled graph serves every block of a transformer and
    both experts of a two-expert model, and a job's hooks on a block (a cache) wrap it from outside."""
    import torch._dynamo.config  # torch has no public recompile limit

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    for model in models:
        names = set(getattr(model, "_repeated_blocks", None) or ())
        blocks = [block for block in model.modules() if type(block).__name__ in names]
        if not blocks:
            raise ValueError(f"{type(model).__name__} names no repeated blocks to compile ({sorted(names)})")
        forwards = []
        for block in blocks:
            block.forward = _CompiledForward(block.forward)
            forwards.append(block.forward)
        _COMPILED_FORWARDS[model] = forwards  # what ``_to_eager`` switches off, wherever hooks hold them


def _to_eager(pipe: Any) -> None:
    """Every compiled block forward of the denoisers back to eager."""
    for name in DENOISERS:
        model = getattr(pipe, name, None)
        for forward in _COMPILED_FORWARDS.get(model, ()) if model is not None else ():
            forward.eager = True


# ------------------------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class GraphKind:
    """What of a variant reaches the compiled blocks: variants of one mode with the same kind share graphs."""

    mode: str
    lora: str | None  # the variant's LoRA (its own adapter, switched on), or none
    cache: str | None  # the cache recipe hooked around the blocks: it adds no graph, but runs before any job does
    guided: bool  # CFG on: LTX-2 batches the unconditional pass with the conditional one
    options: tuple[tuple[str, str], ...]  # the family options the variant passes (LTX-2's distilled, ...)

    @property
    def two_experts(self) -> bool:
        """Wan 2.2 A14B: the schedule switches to ``transformer_2`` at ``boundary_ratio``."""
        return any(key == "boundary_ratio" for key, _ in self.options)


def graph_kind(mode: str, name: str, variant: VariantSpec) -> GraphKind:
    guidance = [variant.guidance_scale, *([variant.guidance_scale_2] if variant.guidance_scale_2 is not None else [])]
    return GraphKind(
        mode=mode,
        lora=f"{mode}/{name}" if variant.lora is not None else None,
        cache=variant.cache.model_dump_json() if variant.cache is not None else None,
        guided=max(guidance) > 1.0,
        options=tuple(sorted((key, repr(value)) for key, value in variant.pipeline_kwargs.items())),
    )


@dataclass(frozen=True)
class WarmupJob:
    """One warm-up denoise: ``job`` is the variant's recipe at one shape, ``kind`` the graph kind it warms."""

    job: ResolvedJob
    kind: GraphKind


def warmup_plan(spec: ModelSpec, catalog: Catalog, *, left_out: Collection[str] = ()) -> list[WarmupJob]:
    """Per mode, per distinct graph kind among the variants (the first variant of each kind runs), one job per
    shape of ``_shapes``. ``left_out``: ``mode/variant`` names this worker does not serve (its LoRA is missing
    here: ``worker.context.unserved_variants``)."""
    plan: list[WarmupJob] = []
    for mode, mode_spec in spec.modes.items():
        kinds: dict[GraphKind, str] = {}
        for name, variant in mode_spec.variants.items():
            if f"{mode}/{name}" not in left_out:
                kinds.setdefault(graph_kind(mode, name, variant), name)
        for kind, name in kinds.items():
            plan += [WarmupJob(job, kind) for job in _shapes(spec, catalog, mode, name)]
    return plan


def _shapes(spec: ModelSpec, catalog: Catalog, mode: str, variant: str) -> list[ResolvedJob]:
    """Jobs that vary each latent dimension: per resolution the first and the last ratio at the shortest and the
    longest duration (the first size fixes the graph, the next ones make each dimension dynamic)."""
    from foundation.core.contract import CreateRequest
    from foundation.core.resolve import resolve

    jobs: list[ResolvedJob] = []
    seen: set[tuple[int, int, int]] = set()
    for resolution in spec.resolutions:
        for ratio in (spec.ratios[0], spec.ratios[-1]):
            for seconds in (min(spec.durations), max(spec.durations)):
                parameters = {"resolution": resolution, "ratio": ratio, "duration_seconds": seconds, "seed": 0}
                request = CreateRequest.model_validate(
                    {
                        "model": spec.id,
                        "mode": mode,
                        "variant": variant,
                        "parameters": {**parameters, "prompt_extend": False},
                        "input": {"prompt": "warm-up"},
                    }
                )
                job = resolve(request, catalog)[0]
                shape = (job.gen_width, job.gen_height, job.num_frames)
                if shape not in seen:
                    seen.add(shape)
                    jobs.append(job)
    return jobs


# ------------------------------------------------------------------------------------------------ running it


def warm_up(adapter: Any, plan: list[WarmupJob]) -> int:
    """Run ``plan`` on ``adapter``; the graphs compiled. On a compile failure the model falls back to eager (its
    blocks' compiled forwards switched off) and 0 is returned. A variant whose LoRA did not load here is skipped
    (its jobs are released to another worker)."""
    before = compiled_graphs()
    steps_to_second: dict[GraphKind, int] = {}
    try:
        for item in plan:
            try:
                run_warmup_job(adapter, item, steps_to_second)
            except ModelLoadError as e:
                log.warning("warm-up skips %s: %s", item.job.variant, e, extra={"model": adapter.spec.id})
    except Exception as e:  # kept broad: dynamo and inductor raise many types; eager always works
        log.warning("compile failed, running %s eagerly: %s", adapter.spec.id, e, extra={"model": adapter.spec.id})
        _to_eager(adapter.pipe)
        return 0
    return compiled_graphs() - before


def run_warmup_job(adapter: Any, item: WarmupJob, steps_to_second: dict[GraphKind, int] | None = None) -> None:
    """One denoise of ``item``: one step, or for a two-expert variant the fewest steps of its schedule in which the
    second expert runs (2, 4, 8, ... up to the variant's own; remembered per kind in ``steps_to_second``), stopped
    right after the step it ran in. An image mode gets a blank image of the generation size, as the worker fits an
    input image to it."""
    job = item.job
    conditioning: dict[str, Any] = {}
    if "image" in mode_inputs(job.mode):
        from PIL import Image

        conditioning["image"] = Image.new("RGB", (job.gen_width, job.gen_height))
    second = getattr(adapter.pipe, "transformer_2", None) if item.kind.two_experts else None
    if second is None:
        adapter.denoise(job.model_copy(update={"steps": 1}), _ignore_step, **conditioning)
        return
    known = steps_to_second if steps_to_second is not None else {}
    ran: list[bool] = []
    handle = second.register_forward_pre_hook(lambda *_: ran.append(True))

    def stop_once_it_ran(done: int, total: int) -> None:
        if ran:
            raise WarmupDone(f"{job.variant}: the second expert ran at step {done} of {total}")

    try:
        for steps in _step_counts(job.steps, known.get(item.kind)):
            ran.clear()
            try:
                adapter.denoise(job.model_copy(update={"steps": steps}), stop_once_it_ran, **conditioning)
            except WarmupDone:
                known[item.kind] = steps
                return
        log.info("%s: the second expert never runs in %d steps", job.variant, job.steps, extra={"model": job.model})
    finally:
        handle.remove()


def _step_counts(steps: int, known: int | None) -> list[int]:
    if known is not None:
        return [known]
    counts, n = [], 2
    while n < steps:
        counts.append(n)
        n *= 2
    return [*counts, steps]


def _ignore_step(done: int, total: int) -> None:
    """A warm-up reports no progress."""

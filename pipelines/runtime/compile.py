"""Regional compile without recompiles during jobs (a runtime profile's ``compile``).

``apply_profile`` compiles the repeated transformer blocks lazily: the first call of each new input shape
compiles. Left alone, a worker compiles inside its first jobs of each size (seconds to minutes on a GPU).
So a compiled model is warmed at load (``warm_up``): one single-step denoise per shape in
``warmup_jobs``, which varies each latent dimension (width, height, frames) once, so dynamo's automatic
dynamic shapes settle on a graph that serves every size the model advertises. During a job the worker
compares ``compiled_graphs()`` before and after: a compile is a metric and a warning, never a failure.
A block that dynamo cannot compile (``fullgraph`` refuses a graph break) makes ``warm_up`` fall back to
eager for the model, with a log line, instead of failing jobs later.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from foundation.core.catalog import Catalog, ModelSpec
    from foundation.core.resolve import ResolvedJob

__all__ = ["compiled_graphs", "warm_up", "warmup_jobs"]

log = logging.getLogger("genworker.pipelines.compile")


def compiled_graphs() -> int:
    """Graphs dynamo compiled in this process so far (its own counter)."""
    from torch._dynamo.utils import counters  # noqa: PLC2701 - torch has no public count of compiled graphs

    return int(counters["stats"]["unique_graphs"])


def warmup_jobs(spec: ModelSpec, catalog: Catalog) -> list[ResolvedJob]:
    """Text-only jobs that vary each latent dimension: per resolution the smallest and the largest frame at the
    shortest and the longest duration (the first size fixes the graph, the next ones make each dimension
    dynamic). Image modes are warmed by their text-to-video twin where the model has one."""
    from foundation.core.contract import CreateRequest
    from foundation.core.resolve import resolve

    if "text_to_video" not in spec.modes:
        return []
    variant = next(iter(spec.modes["text_to_video"].variants))
    jobs: list[ResolvedJob] = []
    seen: set[tuple[int, int, int]] = set()
    for resolution in spec.resolutions:
        for ratio in (spec.ratios[0], spec.ratios[-1]):
            for seconds in (min(spec.durations), max(spec.durations)):
                request = CreateRequest.model_validate(
                    {
                        "model": spec.id,
                        "mode": "text_to_video",
                        "variant": variant,
                        "parameters": {
                            "resolution": resolution,
                            "ratio": ratio,
                            "duration_seconds": seconds,
                            "seed": 0,
                            "prompt_extend": False,
                        },
                        "input": {"prompt": "warm-up"},
                    }
                )
                job = resolve(request, catalog)[0].model_copy(update={"steps": 1})
                shape = (job.gen_width, job.gen_height, job.num_frames)
                if shape not in seen:
                    seen.add(shape)
                    jobs.append(job)
    return jobs


def warm_up(adapter: Any, jobs: list[ResolvedJob]) -> int:
    """Run one step of each job on ``adapter``; the graphs compiled. On a compile failure the model falls back
    to eager (its blocks' compiled wrappers are dropped) and 0 is returned."""
    before = compiled_graphs()
    try:
        for job in jobs:
            adapter.denoise(job, lambda done, total: None)
    except Exception as e:  # kept broad: dynamo and inductor raise many types; eager always works
        log.warning("compile failed, running %s eagerly: %s", adapter.spec.id, e, extra={"model": adapter.spec.id})
        _to_eager(adapter.pipe)
        return 0
    return compiled_graphs() - before


def _to_eager(pipe: Any) -> None:
    """Drop the compiled call of every module ``nn.Module.compile`` wrapped (the blocks run their own forward)."""
    for name in ("transformer", "transformer_2"):
        model = getattr(pipe, name, None)
        for module in model.modules() if model is not None else ():
            if getattr(module, "_compiled_call_impl", None) is not None:
                module._compiled_call_impl = None

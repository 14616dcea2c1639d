"""Which hosted models this worker may advertise: those whose every catalog size fits its device.

The queue holds one stream per model and the API accepts any size the catalog offers for a model with a live
host, so a worker advertises a model only if its memory plan (``pipelines.planning.memory_plan``, under the model's
runtime profile with this worker's overrides) fits every resolution at the longest duration on this device.
A model that does not is left out of the heartbeat and never claimed, with the reason logged, so its jobs
wait for a worker with a larger device instead of failing out of memory here.

Off CUDA, for tiny models, and for models that ship no architecture config, nothing is checked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from foundation.core.catalog import Catalog, ModelSpec
from foundation.core.errors import FatalWorkerError
from foundation.settings import Settings
from pipelines.errors import ModelLoadError
from pipelines.planning.memory_plan import device_memory_gb, plan_model
from pipelines.runtime.profile import runtime_profile
from pipelines.runtime.registry import resolve_device

__all__ = ["advertisable_models", "fitting_models", "planned_peak"]

log = logging.getLogger("genworker.worker")


def advertisable_models(settings: Settings, catalog: Catalog, hosted: list[str]) -> list[str]:
    """``hosted`` without the models whose sizes do not all fit this device; fatal if none is left."""
    real = [m for m in hosted if not catalog.models[m].tiny]
    if not real:  # tiny CPU models only: nothing to plan (and no torch import at start)
        return hosted
    device_gb = device_memory_gb(resolve_device(settings.models.device))
    return hosted if device_gb is None else fitting_models(settings, catalog, hosted, device_gb)


def fitting_models(settings: Settings, catalog: Catalog, hosted: list[str], device_gb: float) -> list[str]:
    """``hosted`` without the models whose sizes do not all fit a ``device_gb`` device; fatal if none is left."""
    kept = []
    for model in hosted:
        reason = _unfit(catalog, model, settings, device_gb)
        if reason is None:
            kept.append(model)
        else:
            log.error("model not advertised", extra={"model": model, "device_gb": round(device_gb, 1), "why": reason})
    if not kept:
        raise FatalWorkerError(f"no hosted model fits this {device_gb:.0f} GB device (genworker plan shows why)")
    return kept


def _unfit(catalog: Catalog, model: str, settings: Settings, device_gb: float) -> str | None:
    spec = catalog.models[model]
    try:
        profile = runtime_profile(spec, settings.models)
    except ModelLoadError:
        return None  # the load refuses it with the reason; not this check's to report
    plan = plan_model(spec, profile, device_gb)
    short = [row for row in plan.rows if row.max_seconds < row.seconds]
    if not short:
        return None
    return "; ".join(
        f"{row.resolution} {row.seconds} s needs {row.peak_gb[profile.offload]:.1f} GB with offload "
        f"{profile.offload} ({row.verdict})"
        for row in short
    )


def planned_peak(settings: Settings) -> Callable[[ModelSpec], int | None]:
    """What the model cache counts a model as on a CUDA device: the most memory one of its jobs uses under the
    profile this worker runs it with (``profile_overrides`` included), from the memory plan; None for a model
    without a plan (tiny, no arch config), which the cache then sizes by its catalog figure or measures."""

    def peak(spec: ModelSpec) -> int | None:
        if spec.tiny:
            return None
        try:
            profile = runtime_profile(spec, settings.models)
        except ModelLoadError:
            return None  # the load refuses it with the reason
        return plan_model(spec, profile, device_gb=0.0).peak_bytes()

    return peak

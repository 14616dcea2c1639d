"""Loaded models kept resident across jobs, least recently used evicted first under a memory budget.

Budget (``ModelRuntimeSettings.cache_budget_gb``):
- ``0`` means one model at a time: loading a model first evicts every other one;
- ``N > 0`` keeps models while their sizes add up to at most N GiB, evicting the least recently used
  (before a load, by the new model's expected size; after it, by its measured size). A single model
  larger than the budget still loads; it then stays alone.

A model's size on a CUDA device is the most memory one of its jobs uses under its active profile (weights plus
working memory: ``planned_peak``, which the worker fills from the memory plan, so a worker's profile override
that keeps more resident counts), else its declared ``gpu_memory_gb``; off CUDA, or with neither, the parameter
and buffer bytes it holds, measured after loading and again on every hit: what it loads lazily later (Wan's
prompt-extension LLM) counts toward the budget from the next job on.

Thread safety: one GPU loop calls ``get``/``evict``/``clear`` while a heartbeat thread reads ``loaded()``.
State changes happen under a short lock; the slow load itself runs outside it (under a separate load lock),
so a heartbeat never waits for a model to load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipelines.runtime.context_parallel import load_across_gpus
from pipelines.runtime.memory import free_device_memory
from pipelines.runtime.registry import load_adapter, resolve_device

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.adapter import Adapter

__all__ = ["ModelCache"]

log = logging.getLogger("genworker.pipelines")

_GIB = 2**30


@dataclass
class _Entry:
    adapter: Adapter
    size_bytes: int


class ModelCache:
    def __init__(
        self, runtime: ModelRuntimeSettings, *, planned_peak: Callable[[ModelSpec], int | None] | None = None
    ) -> None:
        self.runtime = runtime
        self._planned_peak = planned_peak
        self._device: str | None = None
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._loads: dict[str, int] = {}
        self._load_seconds: dict[str, float] = {}
        self._sizes: dict[str, int] = {}  # last measured size per model, kept after eviction
        self._state = threading.Lock()
        self._loading = threading.Lock()

    @property
    def budget_bytes(self) -> int:
        return int(self.runtime.cache_budget_gb * _GIB)

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = resolve_device(self.runtime.device)
        return self._device

    # ------------------------------------------------------------------------------------------ reads

    def loaded(self) -> list[str]:
        """Ids of resident models, least recently used first."""
        with self._state:
            return list(self._entries)

    def load_count(self, model_id: str | None = None) -> int:
        """How many times ``model_id`` (or, with no id, any model) was loaded by this cache."""
        with self._state:
            return self._loads.get(model_id, 0) if model_id is not None else sum(self._loads.values())

    def load_seconds(self, model_id: str) -> float | None:
        """Duration of the latest load of ``model_id``, or None if it was never loaded."""
        with self._state:
            return self._load_seconds.get(model_id)

    def resident_bytes(self) -> int:
        with self._state:
            return sum(entry.size_bytes for entry in self._entries.values())

    # ------------------------------------------------------------------------------------------ get

    def get(self, spec: ModelSpec) -> Adapter:
        """The loaded adapter for ``spec``, loading it (and evicting others) if it is not resident."""
        hit = self._touch(spec.id)
        if hit is not None:
            self._remeasure(spec, hit)
            return hit
        with self._loading:
            hit = self._touch(spec.id)  # another caller may have loaded it while we waited
            if hit is not None:
                return hit
            self._make_room(spec.id, self.expected_bytes(spec))
            started = time.perf_counter()
            if self.runtime.gpus_per_job > 1:  # one job across the node's GPUs
                adapter: Adapter = load_across_gpus(spec, self.runtime)
            else:
                adapter = load_adapter(spec, self.runtime)
            seconds = time.perf_counter() - started
            size = self._size_of(spec, adapter)
            with self._state:
                self._entries[spec.id] = _Entry(adapter, size)
                self._loads[spec.id] = self._loads.get(spec.id, 0) + 1
                self._load_seconds[spec.id] = seconds
                self._sizes[spec.id] = size
            self._make_room(spec.id, 0)  # measured size known now: trim the others if needed
            log.info(
                "model cached",
                extra={"model": spec.id, "size_mb": round(size / 2**20, 1), "elapsed_ms": round(seconds * 1000)},
            )
            return adapter

    # ------------------------------------------------------------------------------------------ eviction

    def evict(self, model_id: str) -> bool:
        """Unload ``model_id`` if resident; True when something was evicted."""
        with self._state:
            entry = self._entries.pop(model_id, None)
        if entry is None:
            return False
        self._unload(model_id, entry)
        free_device_memory(self.device)
        return True

    def clear(self) -> None:
        """Unload every model and return the memory (the worker calls this after an out-of-memory error)."""
        with self._state:
            entries = list(self._entries.items())
            self._entries.clear()
        for model_id, entry in entries:
            self._unload(model_id, entry)
        free_device_memory(self.device)

    def _touch(self, model_id: str) -> Adapter | None:
        with self._state:
            entry = self._entries.get(model_id)
            if entry is None:
                return None
            self._entries.move_to_end(model_id)
            return entry.adapter

    def _make_room(self, keep: str, incoming: int) -> None:
        """Evict least recently used models (never ``keep``) until ``incoming`` more bytes fit the budget."""
        budget = self.budget_bytes
        while True:
            with self._state:
                others = [m for m in self._entries if m != keep]
                used = sum(entry.size_bytes for entry in self._entries.values())
                over = budget == 0 or used + incoming > budget
                if not others or not over:
                    return
                victim = others[0]
                entry = self._entries.pop(victim)
            log.info("evicting model", extra={"model": victim, "budget_gb": self.runtime.cache_budget_gb})
            self._unload(victim, entry)
            free_device_memory(self.device)

    def _remeasure(self, spec: ModelSpec, adapter: Adapter) -> None:
        """Update a resident model's size (it may have grown since loading) and trim the others to fit."""
        size = self._size_of(spec, adapter)
        with self._state:
            entry = self._entries.get(spec.id)
            if entry is None or entry.size_bytes == size:
                return
            entry.size_bytes = size
            self._sizes[spec.id] = size
        self._make_room(spec.id, 0)

    def expected_bytes(self, spec: ModelSpec) -> int:
        """What ``spec`` will count against the budget once loaded (0: unknown until measured)."""
        declared = self._declared_size(spec)
        return declared if declared is not None else self._sizes.get(spec.id, 0)

    def _size_of(self, spec: ModelSpec, adapter: Adapter) -> int:
        declared = self._declared_size(spec)
        return declared if declared is not None else adapter.memory_bytes()

    def _declared_size(self, spec: ModelSpec) -> int | None:
        """On CUDA: the planned peak under the active profile, else the catalog's ``gpu_memory_gb``."""
        if not self.device.startswith("cuda"):
            return None
        planned = self._planned_peak(spec) if self._planned_peak is not None else None
        if planned is not None:
            return planned
        return int(spec.gpu_memory_gb * _GIB) if spec.gpu_memory_gb > 0 else None

    @staticmethod
    def _unload(model_id: str, entry: _Entry) -> None:
        try:
            entry.adapter.unload()
        except Exception:  # an unload that fails must not keep the cache from moving on
            log.exception("unloading model failed", extra={"model": model_id})

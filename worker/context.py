"""Setup of a worker process: everything built once from ``Settings`` and passed down explicitly.

Order matters: the status server answers ``/healthz`` (and ``/readyz`` 503) while models are still
loading, heartbeats announce the worker as not ready, and readiness comes only after every preloaded
model is resident.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.core.catalog import Catalog
from foundation.core.errors import CatalogError, FatalWorkerError
from foundation.queue.base import WorkerHeartbeat, WorkerQueue
from foundation.settings import Settings
from foundation.stores.base import ArtifactStore
from pipelines.runtime.options import load_model_catalog
from pipelines.runtime.previews import PreviewCadence
from worker.attempt import Settler
from worker.checkpoints import CheckpointSetup, DrainClock
from worker.faults import LocalFaults
from worker.health import HealthState, StatusServer
from worker.lease import Heartbeat, LeaseKeeper
from worker.lifecycle import Shutdown
from worker.memory import advertisable_models, planned_peak
from worker.metrics import WorkerMetrics
from worker.postprocess import PostProcessingLane, PostProcessor
from worker.runner import JobRunner
from worker.sweeper import Sweeper, SweeperThread

if TYPE_CHECKING:
    from pipelines.runtime.cache import ModelCache

__all__ = ["WorkerContext", "ensure_tiny_models", "start_worker_context", "unserved_variants"]

log = logging.getLogger("genworker.worker")


@dataclass
class WorkerContext:
    settings: Settings
    worker_id: str
    hosted_models: list[str]
    catalog: Catalog
    queue: WorkerQueue
    store: ArtifactStore
    cache: ModelCache
    metrics: WorkerMetrics
    faults: LocalFaults
    health: HealthState
    leases: LeaseKeeper
    heartbeat: Heartbeat
    runner: JobRunner
    post: PostProcessingLane
    status_server: StatusServer | None = None
    sweeper: SweeperThread | None = None
    current_job: str | None = field(default=None)
    unserved_variants: dict[str, list[str]] = field(default_factory=dict)  # model -> mode/variant it lacks

    def beat(self) -> WorkerHeartbeat:
        # A model a local fault keeps this worker off is not offered while the fault lasts: GET /v1/models
        # reports it unavailable when no other worker takes it, and its jobs wait (``worker.faults``).
        ready = self.faults.ready_models()
        return WorkerHeartbeat(
            worker_id=self.worker_id,
            hosted_models=ready,
            faulted_models=[m for m in self.hosted_models if m not in ready],
            unserved_variants=self.unserved_variants,
            loaded_models=list(self.cache.loaded()),
            current_job=self.current_job,
            ready=self.health.ready,
        )

    def stop(self) -> None:
        if self.sweeper is not None:
            self.sweeper.stop()
            self.sweeper.join(5.0)  # a pass in progress ends at its next queue or store call
        self.heartbeat.stop()
        self.leases.stop()
        self.post.close()
        self.runner.close()
        if self.status_server is not None:
            self.status_server.stop()
        self.queue.close()


def hosted_catalog(settings: Settings) -> tuple[Catalog, list[str]]:
    try:
        catalog = load_model_catalog(settings.catalog_path)
    except CatalogError as e:
        raise FatalWorkerError(str(e)) from e
    hosted = list(dict.fromkeys(settings.worker.hosted_models))
    unknown = [m for m in [*hosted, *settings.worker.preload] if catalog.get(m) is None]
    if unknown or not hosted:
        raise FatalWorkerError(f"hosted/preload models not in the catalog {catalog.source}: {unknown or 'none'}")
    return catalog, hosted


def ensure_tiny_models(settings: Settings, catalog: Catalog, hosted: list[str]) -> None:
    """Build the tiny CPU models (offline, seconds) when a hosted one is missing or outdated on disk."""
    tiny = [catalog.models[m] for m in hosted if catalog.models[m].tiny]
    if not tiny:
        return
    from pipelines.tiny.builders import build_all, is_built

    root = Path(settings.models.tiny_models_dir)
    missing = [spec.id for spec in tiny if not is_built(root / spec.weights)]
    if missing and not settings.worker.build_tiny_models:
        raise FatalWorkerError(f"tiny models {missing} are missing from {root} (build_tiny_models is off)")
    if settings.worker.build_tiny_models:
        started = time.perf_counter()
        build_all(root)  # skips complete builds; also builds the tiny prompt LLM
        elapsed_ms = round((time.perf_counter() - started) * 1000)
        log.info("tiny models ready", extra={"dir": str(root), "elapsed_ms": elapsed_ms, "built": missing})


def unserved_variants(settings: Settings, catalog: Catalog, hosted: list[str]) -> dict[str, list[str]]:
    """Per hosted model, the variants this node cannot run because their weights are missing here
    (``pipelines.runtime.lora.variants_without_weights``): left out of the heartbeat's advertisement."""
    from pipelines.runtime.lora import variants_without_weights

    out: dict[str, list[str]] = {}
    for model in hosted:
        missing = variants_without_weights(catalog.models[model], settings.models)
        if missing:
            log.warning(
                "variants not advertised: their weights are missing here", extra={"model": model, "variants": missing}
            )
            out[model] = missing
    return out


def work_root(settings: Settings) -> Path:
    """Where attempts encode (one dir each, removed after upload; the sweeper removes a killed worker's)."""
    root = Path(settings.data_dir) / "work"
    root.mkdir(parents=True, exist_ok=True)
    return root


def preload(ctx: WorkerContext) -> None:
    """Load the preloaded models before the worker reports ready; a compiled one is also warmed, every graph kind
    of the variants it serves (LoRA on or off, each expert, image modes) at the shapes it advertises
    (``pipelines.runtime.compile``), so its jobs do not compile, from the compile caches an earlier start kept
    (``worker.compile_cache``)."""
    for model in ctx.settings.worker.preload:
        started = time.perf_counter()
        spec = ctx.catalog.models[model]
        try:
            adapter = ctx.cache.get(spec)
        except Exception as e:  # a worker that cannot host its preloaded model must not report ready
            raise FatalWorkerError(f"preloading {model} failed: {e}") from e
        seconds = time.perf_counter() - started
        ctx.metrics.model_load_seconds.labels(model).observe(seconds)
        log.info("preloaded", extra={"model": model, "elapsed_ms": round(seconds * 1000)})
        if adapter.profile.compile:
            from pipelines.runtime.compile import warm_up, warmup_plan
            from worker.compile_cache import compile_cache

            started = time.perf_counter()
            plan = warmup_plan(spec, ctx.catalog, left_out=ctx.unserved_variants.get(model, ()))
            with compile_cache(ctx.settings, ctx.store, spec, adapter):  # a restart finds what this compiles
                graphs = warm_up(adapter, plan)
            elapsed_ms = round((time.perf_counter() - started) * 1000)
            extra = {"model": model, "graphs": graphs, "jobs": len(plan), "elapsed_ms": elapsed_ms}
            log.info("compile warm-up done", extra=extra)


def start_worker_context(settings: Settings, shutdown: Shutdown) -> WorkerContext:
    """Build and start everything; raise ``FatalWorkerError`` on a configuration the worker cannot run."""
    from foundation.queue.factory import open_queue
    from foundation.stores.factory import open_store
    from pipelines.runtime.cache import ModelCache

    catalog, hosted = hosted_catalog(settings)
    hosted = advertisable_models(settings, catalog, hosted)  # the memory plan: only models this device fits
    ensure_tiny_models(settings, catalog, hosted)
    unserved = unserved_variants(settings, catalog, hosted)
    ws = settings.worker
    worker_id = ws.worker_id or f"{socket.gethostname()}-{os.getpid()}"
    metrics = WorkerMetrics()
    metrics.host(hosted)
    queue = open_queue(settings.queue)
    faults = LocalFaults(
        metrics,
        hosted,
        worker_id=worker_id,
        base_s=ws.fault_backoff_s,
        cap_s=ws.fault_backoff_max_s,
        load_failure_workers=ws.model_load_failure_workers,
        fleet=queue,
    )
    health = HealthState(metrics, faults)
    health.set_ready(False, "loading models")
    status_server = _start_status_server(settings, health, metrics)
    store = open_store(settings.store, data_dir=settings.data_dir)
    store.ensure_bucket()  # S3: create the bucket once at start, not on the first upload
    leases = LeaseKeeper(queue, settings.queue.lease_ttl_s, ws.hang_margin_s, on_hang=health.mark_unhealthy)
    cache = ModelCache(settings.models, planned_peak=planned_peak(settings))
    runner, post = _job_path(
        settings=settings,
        catalog=catalog,
        queue=queue,
        store=store,
        cache=cache,
        leases=leases,
        metrics=metrics,
        faults=faults,
        shutdown=shutdown,
    )
    sweeper = SweeperThread(
        Sweeper(queue, store if ws.sweep_objects else None, work_root(settings), min_age_s=ws.sweep_min_age_s),
        ws.sweep_interval_s,
    )
    ctx = WorkerContext(
        settings=settings,
        worker_id=worker_id,
        hosted_models=hosted,
        catalog=catalog,
        queue=queue,
        store=store,
        cache=cache,
        metrics=metrics,
        faults=faults,
        health=health,
        leases=leases,
        heartbeat=Heartbeat(queue, ws.heartbeat_s, ws.reclaim_interval_s, lambda: ctx.beat(), metrics),  # noqa: PLW0108 (bound late)
        runner=runner,
        post=post,
        status_server=status_server,
        sweeper=sweeper,
        unserved_variants=unserved,
    )
    ctx.heartbeat.start()
    sweeper.start()  # its first pass runs now, beside the preload
    preload(ctx)
    leases.start()
    return ctx


def _start_status_server(settings: Settings, health: HealthState, metrics: WorkerMetrics) -> StatusServer | None:
    ws = settings.worker
    if ws.metrics_port is None:
        return None
    try:
        server = StatusServer(ws.metrics_host, ws.metrics_port, health, metrics)
    except OSError as e:
        raise FatalWorkerError(f"cannot listen on {ws.metrics_host}:{ws.metrics_port}: {e}") from e
    server.start()
    return server


def _job_path(
    *,
    settings: Settings,
    catalog: Catalog,
    queue: WorkerQueue,
    store: ArtifactStore,
    cache: ModelCache,
    leases: LeaseKeeper,
    metrics: WorkerMetrics,
    faults: LocalFaults,
    shutdown: Shutdown,
) -> tuple[JobRunner, PostProcessingLane]:
    """The GPU side and the post-processing side of a job, sharing one settler."""
    ws = settings.worker
    settler = Settler(
        queue,
        leases,
        metrics,
        faults,
        backoff_base_s=settings.queue.retry_backoff_s,
        backoff_cap_s=ws.max_backoff_s,
        store=store,  # a generation that ends deletes its denoising checkpoint
    )
    checkpointing = None
    if ws.checkpoints:

        def grace_end() -> float | None:
            started = shutdown.drain_started
            return None if started is None else started + ws.drain_grace_s

        drain = DrainClock(shutdown.draining, shutdown.stop_now, grace_end)
        checkpointing = CheckpointSetup(store, drain, ws.drain_finish_margin_s, work_root(settings))
    runner = JobRunner(
        catalog=catalog,
        queue=queue,
        cache=cache,
        leases=leases,
        settler=settler,
        metrics=metrics,
        faults=faults,
        stop_now=shutdown.stop_now,
        progress_interval_s=ws.progress_interval_s,
        previews=PreviewCadence(ws.preview_every_steps, ws.preview_interval_s) if ws.previews else None,
        work_root=work_root(settings),
        store=store,  # input images of image_to_video jobs
        checkpointing=checkpointing,
        overlap_stage_write=ws.overlap_stage_write,
    )
    processor = PostProcessor(
        catalog=catalog,
        queue=queue,
        store=store,
        encoder=settings.encoder,
        settler=settler,
        metrics=metrics,
        faults=faults,
    )
    return runner, PostProcessingLane(processor, overlap=ws.overlap)

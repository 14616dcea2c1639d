"""Prometheus metrics of one worker process, in a registry of its own (no global state).

Served on ``/metrics`` by ``worker.health.StatusServer``. Names follow the Prometheus conventions:
``_total`` counters, ``_seconds`` histograms, base units.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["WorkerMetrics"]

# Tiny CPU jobs take tenths of a second, real GPU jobs tens of minutes: buckets span both.
_STAGE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_LOAD_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# From an idle fleet (sub-second) to a backlog of long GPU jobs (hours).
_WAIT_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.jobs = Counter(
            "genworker_jobs", "Job attempts ended by this worker, by outcome.", ["model", "status", "code"], registry=r
        )
        self.retries = Counter(
            "genworker_job_retries", "Attempts handed back for a retry, by reason.", ["model", "code"], registry=r
        )
        self.released = Counter(
            "genworker_jobs_released",
            "Attempts released for re-delivery (worker stopping, or a fault of its own).",
            ["model"],
            registry=r,
        )
        self.abandoned = Counter(
            "genworker_jobs_abandoned", "Attempts dropped because the claim went stale.", ["model"], registry=r
        )
        self.stage_seconds = Histogram(
            "genworker_stage_seconds", "Time per job stage.", ["model", "stage"], buckets=_STAGE_BUCKETS, registry=r
        )
        self.model_load_seconds = Histogram(
            "genworker_model_load_seconds", "Time to load a model.", ["model"], buckets=_LOAD_BUCKETS, registry=r
        )
        # Observed at each claim: the job's age then (now - created_at). A job given back (lapsed lease,
        # release) and claimed again is observed again, its earlier runs included: the wait its client saw.
        self.queue_wait = Histogram(
            "genworker_queue_wait_seconds",
            "Time from a job's creation to its claim, per claim.",
            ["model"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        # From the heartbeat's reclaim sweep; the queue's claim path also reclaims in passing and does
        # not report a count, so this is a lower bound of the fleet's lapsed leases.
        self.leases_reclaimed = Counter(
            "genworker_leases_reclaimed",
            "Jobs this worker re-queued or dead-lettered because their holder's lease lapsed.",
            registry=r,
        )
        # Rolling upgrades (foundation/queue/newer.py): jobs whose record a newer version wrote, met here.
        self.newer_records = Counter(
            "genworker_newer_records",
            "Jobs whose record a newer version wrote that this worker met: left to workers of that version "
            "(outcome=left, no attempt used), or failed version_unavailable once they waited past "
            "queue.newer_record_wait_s with none of them there (outcome=failed).",
            ["model", "outcome"],
            registry=r,
        )
        self.queue_depth = Gauge("genworker_queue_depth", "Jobs waiting, per hosted model.", ["model"], registry=r)
        # Fair share (queue.fair): how many projects share a pool's backlog and how long its longest-waiting
        # job has waited; no label per project, so the series stay as few as the models.
        self.queue_projects = Gauge(
            "genworker_queue_projects", "Projects with queued jobs, per hosted model.", ["model"], registry=r
        )
        self.queue_oldest_seconds = Gauge(
            "genworker_queue_oldest_seconds",
            "Wait so far of the longest-waiting due job, per hosted model (0: none waits).",
            ["model"],
            registry=r,
        )
        self.in_flight = Gauge("genworker_jobs_in_flight", "Jobs claimed and not yet ended.", registry=r)
        self.ready = Gauge("genworker_ready", "1 when the worker takes jobs.", registry=r)
        # One series per hosted model, so "no ready worker for model X" is one aggregation away, and a
        # dead worker's series vanish with it (deploy/prometheus/rules.yaml).
        self.model_ready = Gauge(
            "genworker_model_ready", "1 per hosted model while this worker takes jobs.", ["model"], registry=r
        )
        self.local_faults = Counter(
            "genworker_local_faults",
            "Faults that released a job without using an attempt: this worker's own (model load, encoder, disk, "
            "device) or a backend (store, queue) that did not answer during the job.",
            ["kind", "model"],
            registry=r,
        )
        # 1 while the fault is recorded (backing off, or probing until a job gets past it); model "" for
        # a worker-wide fault. A cleared fault's series stays at 0.
        self.worker_fault = Gauge(
            "genworker_worker_fault", "1 while this worker has a fault of its own.", ["kind", "model"], registry=r
        )
        self._hosted: tuple[str, ...] = ()
        self._ready_flag = False
        self._fault_free: tuple[str, ...] | None = None  # None: no fault recorded, every hosted model
        # Denoising checkpoints (worker.checkpoints): written, refused on resume, and what resumes saved.
        self.checkpoints = Counter(
            "genworker_checkpoints", "Denoising checkpoints written to the store.", ["model"], registry=r
        )
        self.checkpoint_bytes = Counter(
            "genworker_checkpoint_bytes", "Bytes of denoising checkpoints written.", ["model"], registry=r
        )
        self.checkpoint_seconds = Histogram(
            "genworker_checkpoint_write_seconds",
            "Time to write one checkpoint (serialize + upload, off the GPU thread).",
            ["model"],
            buckets=_STAGE_BUCKETS,
            registry=r,
        )
        self.checkpoints_refused = Counter(
            "genworker_checkpoints_refused",
            "Stored checkpoints not used (fingerprint or steps mismatch, corrupt, unreadable, or a mismatch of their "
            "contents found while restoring them: deleted); the job restarted from step 0.",
            ["model", "reason"],
            registry=r,
        )
        self.resumes = Counter("genworker_resumes", "Attempts resumed from a checkpoint.", ["model"], registry=r)
        self.resume_saved_seconds = Counter(
            "genworker_resume_saved_seconds",
            "Denoising seconds resumes did not redo (resumed steps x this attempt's mean step time).",
            ["model"],
            registry=r,
        )
        self.compiles_in_jobs = Counter(
            "genworker_compiles_in_jobs",
            "Graphs a compiled model compiled during a job (its load-time warm-up missed that shape).",
            ["model"],
            registry=r,
        )
        # Denoising throughput per succeeded job (pipelines.runtime.flops: the denoisers' FLOPs on meta copies).
        self.denoise_flops = Counter(
            "genworker_denoise_flops", "FLOPs of the denoising of succeeded jobs.", ["model"], registry=r
        )
        self.denoise_tflops = Histogram(
            "genworker_denoise_tflops",
            "Achieved TFLOP/s of one job's denoising stage.",
            ["model"],
            buckets=(0.01, 0.1, 1, 10, 50, 100, 200, 300, 400, 500, 600, 700, 800, 1000, 1500, 2000),
            registry=r,
        )
        self.denoise_mfu = Histogram(
            "genworker_denoise_mfu",
            "Model FLOPs utilization of one job's denoising (achieved / the GPU's dense bf16 peak); GPUs we know.",
            ["model"],
            buckets=(0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 1.0),
            registry=r,
        )
        self._fault_series: set[tuple[str, str]] = set()
        self._ready_lock = threading.Lock()  # readiness and faults are set from different threads
        self.healthy = Gauge("genworker_healthy", "0 once the worker needs a restart.", registry=r)
        self.gpu_memory = Gauge(
            "genworker_gpu_memory_bytes", "CUDA memory of this process.", ["device", "kind"], registry=r
        )

    def host(self, models: list[str]) -> None:
        """The models this worker claims jobs for: each gets a ``genworker_model_ready`` series (0 until ready)."""
        self._hosted = tuple(models)
        for model in self._hosted:
            self.model_ready.labels(model).set(0)

    def set_ready(self, ready: bool) -> None:
        with self._ready_lock:
            self._ready_flag = ready
            self._publish_ready()

    def set_model_faults(self, fault_free: list[str], faults: list[tuple[str, str]]) -> None:
        """The hosted models without a fault, and the (kind, model) faults now recorded."""
        with self._ready_lock:
            self._fault_free = tuple(fault_free)
            for kind, model in self._fault_series - set(faults):
                self.worker_fault.labels(kind, model).set(0)
            for kind, model in faults:
                self.worker_fault.labels(kind, model).set(1)
            self._fault_series |= set(faults)
            self._publish_ready()

    def _publish_ready(self) -> None:
        models = self._hosted if self._fault_free is None else self._fault_free
        self.ready.set(1 if self._ready_flag and (models or not self._hosted) else 0)
        for model in self._hosted:
            self.model_ready.labels(model).set(1 if self._ready_flag and model in models else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def sample_gpu_memory(self) -> None:
        """Record allocated/reserved CUDA memory and the card's total (headroom alerts need the total);
        nothing on CPU-only machines, nor before the worker itself imports torch (never imported here).

        Called from the heartbeat thread, which starts while the worker is still starting up: torch may
        be in ``sys.modules`` half imported by the main thread (a partially initialized module, no
        ``cuda`` yet), which made the first beats of every start log an ERROR. The ``import`` statement
        waits for an import in progress on another thread to finish (the module's import lock), so the
        first sample waits for the worker's own import; the beat itself was sent before this."""
        import sys

        if "torch" not in sys.modules:
            return
        import torch

        if not torch.cuda.is_available():
            return
        for index in range(torch.cuda.device_count()):
            self.gpu_memory.labels(str(index), "allocated").set(torch.cuda.memory_allocated(index))
            self.gpu_memory.labels(str(index), "reserved").set(torch.cuda.memory_reserved(index))
            self.gpu_memory.labels(str(index), "total").set(torch.cuda.get_device_properties(index).total_memory)

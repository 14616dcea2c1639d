"""Prometheus metrics of one worker process, in a registry of its own (no global state).

Served on ``/metrics`` by ``worker.health.StatusServer``. Names follow the Prometheus conventions:
``_total`` counters, ``_seconds`` histograms, base units.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["WorkerMetrics"]

# Tiny CPU jobs take tenths of a second, real GPU jobs tens of minutes: buckets span both.
_STAGE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_LOAD_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


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
            "genworker_jobs_released", "Attempts released for re-delivery (worker stopping).", ["model"], registry=r
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
        self.queue_depth = Gauge("genworker_queue_depth", "Jobs waiting, per hosted model.", ["model"], registry=r)
        self.in_flight = Gauge("genworker_jobs_in_flight", "Jobs claimed and not yet ended.", registry=r)
        self.ready = Gauge("genworker_ready", "1 when the worker takes jobs.", registry=r)
        # One series per hosted model, so "no ready worker for model X" is one aggregation away, and a
        # dead worker's series vanish with it (deploy/prometheus/rules.yaml).
        self.model_ready = Gauge(
            "genworker_model_ready", "1 per hosted model while this worker takes jobs.", ["model"], registry=r
        )
        self._hosted: tuple[str, ...] = ()
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
        value = 1 if ready else 0
        self.ready.set(value)
        for model in self._hosted:
            self.model_ready.labels(model).set(value)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def sample_gpu_memory(self) -> None:
        """Record allocated/reserved CUDA memory and the card's total (headroom alerts need the total);
        nothing on CPU-only machines (torch imported lazily)."""
        import sys

        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            return
        for index in range(torch.cuda.device_count()):
            self.gpu_memory.labels(str(index), "allocated").set(torch.cuda.memory_allocated(index))
            self.gpu_memory.labels(str(index), "reserved").set(torch.cuda.memory_reserved(index))
            self.gpu_memory.labels(str(index), "total").set(torch.cuda.get_device_properties(index).total_memory)

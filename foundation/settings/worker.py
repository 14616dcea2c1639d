"""The ``worker`` section of ``Settings``: what a daemon hosts and how it behaves."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["WorkerSettings"]


class WorkerSettings(BaseModel):
    """The ``worker`` section (env ``GENWORKER_WORKER__*``): what a daemon hosts and how it behaves."""

    worker_id: str = Field(
        default="",
        description=(
            'Empty worker_id: "<hostname>-<pid>", unique per process so a restarted worker is a new consumer.'
        ),
    )
    hosted_models: list[str] = Field(
        default_factory=lambda: ["tiny-wan", "tiny-ltx2"],
        description="Catalog ids this worker claims jobs for (it never claims any other model's).",
    )
    preload: list[str] = Field(
        default_factory=list, description="Loaded before the worker reports ready (/readyz, heartbeat ``ready``)."
    )
    metrics_port: int | None = Field(
        default=None,
        description="/metrics, /healthz and /readyz; None disables the HTTP server, 0 picks a free port (logged).",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Bind address of /metrics, /healthz, /readyz (`0.0.0.0` in containers)."
    )
    heartbeat_s: float = Field(
        default=5.0,
        gt=0,
        description="Heartbeat period; a heartbeat lives 3 periods, then /v1/models drops the worker.",
    )
    drain_grace_s: float = Field(
        default=60.0,
        ge=0,
        description="SIGTERM: stop claiming, let running work finish within this grace, else release it.",
    )
    checkpoints: bool = Field(
        default=True,
        description=(
            "Checkpoint the denoising loop of resumable models to the artifact store (cadence: the catalog's "
            "checkpoints), so a re-delivered job resumes from its last checkpoint instead of step 0."
        ),
    )
    preempt_file: str | None = Field(
        default=None,
        description=(
            "A path whose appearance is a preemption notice (as spot-instance notices can be scripted): the "
            "worker drains as on SIGTERM, checkpointing a job that cannot finish within drain_grace_s."
        ),
    )
    drain_finish_margin_s: float = Field(
        default=30.0,
        ge=0,
        description=(
            "While draining, a job finishes only if its remaining denoising (estimated from its steps so far) "
            "plus this margin (decode, encode, upload) fits the grace left; else it checkpoints and is released."
        ),
    )
    overlap: bool = Field(
        default=True,
        description="Encode+upload of job N overlaps the denoising of job N+1 (at most one job behind the GPU).",
    )
    claim_block_s: float = Field(
        default=1.0,
        ge=0,
        le=30,
        description="How long one claim call waits for work; bounds how fast a drain is noticed while idle.",
    )
    progress_interval_s: float = Field(
        default=0.25,
        ge=0,
        description="Progress writes per job are at most one per this interval (stage changes are always written).",
    )
    overlap_stage_write: bool = Field(
        default=False,
        description="The denoising stage's queue write is sent on a thread while the model starts, instead of "
        "awaited first (its answer, a cancel or a lost claim, still stops the job at the first step). What it "
        'buys: docs/benchmarks.md, "Micro-optimizations off by default (issue 48)".',
    )
    previews: bool = Field(
        default=True,
        description=(
            "Live previews while denoising: a small JPEG of the latents (a linear projection, no extra model) "
            "sent with a progress write and on the event stream as `event: preview`; a request turns its own "
            "off with parameters.preview: false."
        ),
    )
    preview_every_steps: int = Field(
        default=1, ge=1, description="A preview at most every this many denoising steps (and per preview_interval_s)."
    )
    preview_interval_s: float = Field(
        default=1.0,
        ge=0,
        description="At most one preview per this interval per job; each forces one progress write, no more.",
    )
    reclaim_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="How often this worker re-queues other workers' lapsed leases (the claim path does it too).",
    )
    hang_margin_s: float = Field(
        default=60.0,
        ge=0,
        description=(
            "A job still running this long after its time limit is stuck inside one step: its lease is "
            "dropped (re-delivery) and the worker reports unhealthy so its orchestrator restarts it."
        ),
    )
    max_backoff_s: float = Field(
        default=300.0,
        ge=0,
        description="Cap of the exponential retry backoff for transient errors (base: queue.retry_backoff_s).",
    )
    min_free_disk_mb: int = Field(
        default=1024,
        ge=0,
        description=(
            "Free space the work disk (`<data_dir>/work`) must have before the worker claims a job: the largest "
            "job's encoded video and poster fit with room (a 10 s 1080p clip is tens of MB). Below it the worker "
            "claims nothing (a `disk` fault: /readyz says why, retried with the fault backoff) instead of "
            "denoising a job whose encode cannot be written. 0: no check."
        ),
    )
    fault_backoff_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "A fault of this worker's own (a model that does not load, ffmpeg that cannot run, a full work "
            "disk, an unusable GPU) releases the job without using up an attempt and stops claims of that "
            "model (model load) or of every model for fault_backoff_s, doubling per repeat up to the max."
        ),
    )
    fault_backoff_max_s: float = Field(
        default=600.0,
        gt=0,
        description="Cap of that backoff: a worker with a lasting fault still tries one job this often.",
    )
    model_load_failure_workers: int = Field(
        default=3,
        ge=1,
        description=(
            "A job whose model did not load on this many distinct workers (or on every live worker hosting "
            "it, if fewer, but at least two) fails with model_load_failed instead of going round the fleet for "
            "ever. A model's only live host that cannot load it backs off and its jobs wait (GET /v1/models "
            "says the model is unavailable meanwhile); 1 fails the job at the first worker instead."
        ),
    )
    build_tiny_models: bool = Field(
        default=True,
        description="Build the tiny CPU models when a hosted tiny model is missing from models.tiny_models_dir.",
    )
    sweep_interval_s: float = Field(
        default=900.0,
        gt=0,
        description=(
            "The sweeper (worker/sweeper.py) runs at start and then this often: queue retention "
            "(expired records, idempotency keys, capped events, stopped workers' consumers), then the work "
            "dirs of killed workers and artifact objects no record will point at."
        ),
    )
    sweep_min_age_s: float = Field(
        default=3600.0,
        gt=0,
        description=(
            "Work dirs and objects younger than this are never swept; it must exceed the longest upload → "
            "finish gap of a job (a lease TTL is ample), since an object whose record is gone is judged by "
            "age."
        ),
    )
    sweep_objects: bool = Field(
        default=True,
        description=(
            "Sweep artifact objects too (a listing of the whole store per pass). In a large fleet on one "
            "bucket, leave it on for a few workers only; work dirs and queue retention are swept by every "
            "one."
        ),
    )

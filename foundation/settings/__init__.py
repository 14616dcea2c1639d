"""One ``Settings`` object, built once at start and passed down explicitly.

Sources, highest first: explicit arguments > environment ``GENWORKER_*`` (nested with ``__``, e.g.
``GENWORKER_QUEUE__BACKEND=redis``) > a YAML file (``GENWORKER_CONFIG`` or ``--config``) > defaults.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from contextvars import ContextVar
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from foundation.media.settings import EncoderSettings
from foundation.queue.config import QueueSettings
from foundation.settings.hosts import host_port_entries, is_loopback
from foundation.settings.models import ModelRuntimeSettings
from foundation.settings.webhooks import WebhookSettings
from foundation.stores.config import StoreSettings

__all__ = [
    "ENV_PREFIX",
    "ApiSettings",
    "InputSettings",
    "Settings",
    "WebhookSettings",
    "WorkerSettings",
    "load_settings",
    "settings_env",
    "state_paths",
]

ENV_PREFIX = "GENWORKER_"
_NESTED = "__"

# The YAML file for the Settings being built now (``load_settings(config=...)``), else GENWORKER_CONFIG.
_yaml_file: ContextVar[str | None] = ContextVar("genworker_yaml_file", default=None)


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


class InputSettings(BaseModel):
    """The ``api.inputs`` section (env ``GENWORKER_API__INPUTS__*``): input images fetched and checked at create."""

    allow_http_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "`host:port` pairs (names or IP literals, `[v6]:port`; `host:*` for every port) an "
            "`input.image_url` may reach over plain http; every other URL must be https. A host on a "
            "loopback or private address also needs `allow_private_hosts`."
        ),
    )
    allow_private_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "`host:port` pairs (as `allow_http_hosts`) an `input.image_url` may reach on private, loopback, "
            "link-local, CGNAT or other non-public addresses (tests, an image server beside the API). Every "
            "other host must resolve only to public addresses, checked on every hop and connected to as "
            "checked (no DNS rebinding)."
        ),
    )
    max_image_bytes: int = Field(
        default=20_000_000, ge=1, description="Largest input image, in bytes (a fetch stops reading past it)."
    )
    max_image_pixels: int = Field(
        default=16_000_000,
        ge=1,
        description=(
            "Largest input image, width x height, read from its header before decoding (bombs). 16 MP covers "
            "the largest generation size offered (1080p) with room to crop, and a 12 MP phone photo."
        ),
    )
    max_concurrent_images: int = Field(
        default=4,
        ge=1,
        description=(
            "Input images one API process reads and decodes at once; each holds up to `max_image_bytes` and "
            "one decode under `max_image_pixels` (about 64 MB at 16 MP), so this bounds their memory."
        ),
    )
    image_wait_s: float = Field(
        default=5.0,
        ge=0,
        description=(
            "How long a create with an image waits for a free slot (`max_concurrent_images`) before it is "
            "answered 503 `service_unavailable` with `Retry-After`."
        ),
    )
    fetch_timeout_s: float = Field(
        default=10.0, gt=0, description="Time limit of one `image_url` fetch: connect, answer and the whole body."
    )
    max_redirects: int = Field(
        default=0,
        ge=0,
        le=10,
        description="Redirects an `image_url` fetch follows (each hop checked again); 0: a redirect fails it.",
    )

    @field_validator("allow_http_hosts", "allow_private_hosts")
    @classmethod
    def _hosts_name_ports(cls, values: list[str], info: ValidationInfo) -> list[str]:
        return host_port_entries(values, f"api.inputs.{info.field_name}")


class ApiSettings(BaseModel):
    """The ``api`` section (env ``GENWORKER_API__*``): the HTTP tier (``genworker api`` / ``up``)."""

    host: str = Field(default="127.0.0.1", description="Bind address of the HTTP API.")
    port: int = Field(default=8000, ge=0, le=65535, description="Port of the HTTP API.")
    max_body_bytes: int = Field(
        default=1_000_000, ge=1, description="Bodies above this are refused with 413 before they are read whole."
    )
    queue_timeout_s: float = Field(
        default=3.0,
        gt=1,
        description=(
            "The API's socket timeout on Redis (queue, keys, rate limits), in place of queue.socket_timeout_s: a "
            "Redis that stops answering (frozen, a failover) gets each request a 503 with Retry-After within about "
            "this long instead of holding it for the workers' longer bound. A create retried with its "
            "Idempotency-Key after such a 503 is applied once."
        ),
    )
    keys_backend: Literal["auto", "sqlite", "redis"] = Field(
        default="auto",
        description='API keys: "auto" = Redis when the queue is on Redis, else SQLite at <data_dir>/keys.db.',
    )
    keys_redis_url: str | None = Field(default=None, description="default: queue.redis_url")
    rate_limit_per_s: float = Field(
        default=20.0,
        gt=0,
        description=(
            "Per-key rate limit: at most rate_limit_burst requests in any rate_limit_burst / "
            "rate_limit_per_s seconds (a moving window, the same rule in process and on Redis, where API "
            "replicas share it)."
        ),
    )
    rate_limit_burst: int = Field(
        default=60, ge=1, description="Requests a key may make at once before the rate limit applies."
    )
    poll_first_s: int = Field(
        default=5,
        ge=0,
        description=(
            "Retry-After while a generation is not terminal: poll_first_s during the first "
            "poll_first_window_s after create, then a jittered value in [poll_min_s, poll_max_s]."
        ),
    )
    poll_first_window_s: float = Field(default=30.0, ge=0, description="See `GENWORKER_API__POLL_FIRST_S`.")
    poll_min_s: int = Field(default=10, ge=0, description="See `GENWORKER_API__POLL_FIRST_S`.")
    poll_max_s: int = Field(default=15, ge=0, description="See `GENWORKER_API__POLL_FIRST_S`.")
    list_max_limit: int = Field(
        default=100, ge=1, le=1000, description="Largest `limit` of a generations listing page."
    )
    docs: bool = Field(
        default=True, description="Interactive docs at /docs (the schema is always at /v1/openapi.json)."
    )
    events_poll_s: float = Field(
        default=0.5,
        gt=0,
        le=10,
        description=(
            "How often an open `GET /v1/generations/{id}/events` stream reads its job's new events and "
            "progress notes from the queue: the most a live event lags behind the worker's write."
        ),
    )
    events_heartbeat_s: float = Field(
        default=15.0,
        gt=0,
        description=(
            "An event stream with nothing to say sends an SSE comment line this often, so proxies and "
            "clients see a live connection."
        ),
    )
    events_max_streams_per_key: int = Field(
        default=20,
        ge=1,
        description=(
            "Event streams one API key may hold open at once on one API process; one more is answered "
            "429 `too_many_streams` (poll instead, or close a stream)."
        ),
    )
    unhosted_models: Literal["auto", "accept", "refuse"] = Field(
        default="auto",
        description=(
            "A create for a catalog model that no worker hosts (not in worker.hosted_models, no live "
            "worker heartbeat names it): `refuse` answers 400 `invalid_parameter` (param `model`) instead "
            "of a job that would wait for ever; `accept` queues it for a worker still to come "
            "(scale from zero); `auto`: refuse on the SQLite queue (embedded mode), accept on Redis."
        ),
    )
    playground: bool = Field(
        default=False,
        description=(
            "Serve the browser playground at `/` (a form built from /v1/models, live progress, the clip "
            "inline). Its same-origin routes act for the project of `api.playground_api_key`, behind a "
            "session cookie and a CSRF token; anyone who can open the page can spend that project's "
            "budget, so turn it on only where that is meant. `genworker up` turns it on for its dev key."
        ),
    )
    playground_api_key: SecretStr | None = Field(
        default=None,
        description=(
            "The project API key (both generations scopes) the playground acts with; it never leaves "
            "the server. Required when `api.playground` is on."
        ),
    )
    playground_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "`Host` values the playground answers (`host:port`; `*` for any, behind a proxy that checks "
            "it). Empty: 127.0.0.1, localhost and [::1] on `api.port`, and the host of "
            "`store.public_base_url`. Guards against DNS rebinding."
        ),
    )
    playground_session_ttl_s: int = Field(
        default=43_200, ge=60, description="Lifetime of a playground session cookie (renewed on page load)."
    )
    playground_remote: bool = Field(
        default=False,
        description=(
            "Serve the playground on a bind address other than loopback (`api.host` 0.0.0.0, a LAN address). "
            "Off: an API with `api.playground` on such an address refuses to start, and `genworker up "
            "--host` with one starts without the playground. On: the page asks each browser once for "
            "`api.playground_api_key` before it issues a session, so whoever reaches the port still needs the key."
        ),
    )
    inputs: InputSettings = Field(default_factory=InputSettings)

    @model_validator(mode="after")
    def _playground_has_key(self) -> ApiSettings:
        if self.playground and self.playground_api_key is None:
            raise ValueError(
                "api.playground is on but api.playground_api_key is not set (GENWORKER_API__PLAYGROUND_API_KEY)"
            )
        if self.playground and not self.playground_remote and not is_loopback(self.host):
            raise ValueError(
                f"api.playground acts for a project with a key held by the server; on api.host={self.host!r} "
                "(not loopback) anyone who reaches the port could use it. Bind 127.0.0.1, or set "
                "api.playground_remote=true (GENWORKER_API__PLAYGROUND_REMOTE) to serve it there behind the key"
            )
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=_NESTED, extra="forbid")

    data_dir: str = Field(
        default="var",
        description=(
            "The one state directory: the SQLite queue, `keys.db`, the local store, its `store-secret`, the "
            "tiny models, the compile caches and the encoder's `work/`. A relative `queue.sqlite_path`, "
            "`store.local_root`, `models.tiny_models_dir` or `models.compile_cache_dir` resolves under it; a "
            "relative data_dir resolves against the working directory once, at start, so every process given "
            "the same value shares the same files."
        ),
    )
    catalog_path: str | None = Field(default=None, description="default: configs/models.yaml next to the code")
    log_level: str = Field(
        default="INFO", description="`DEBUG`, `INFO`, `WARNING` or `ERROR`; logs are JSON lines on stderr."
    )
    queue: QueueSettings = Field(default_factory=QueueSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    models: ModelRuntimeSettings = Field(default_factory=ModelRuntimeSettings)
    encoder: EncoderSettings = Field(default_factory=EncoderSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)

    @model_validator(mode="after")
    def _state_under_data_dir(self) -> Settings:
        """Make ``data_dir`` absolute and every relative state path a path under it.

        Done once, where the settings are built, so no reader joins paths itself and a child process
        given these values (``settings_env``) needs no working directory of its own.
        """
        root = Path(self.data_dir).expanduser().absolute()
        self.data_dir = str(root)
        self.queue = self.queue.model_copy(update={"sqlite_path": _under(root, self.queue.sqlite_path)})
        self.store = self.store.model_copy(update={"local_root": _under(root, self.store.local_root)})
        models = {"tiny_models_dir": _under(root, self.models.tiny_models_dir)}
        if self.models.compile_cache_dir:  # empty: off
            models["compile_cache_dir"] = _under(root, self.models.compile_cache_dir)
        self.models = self.models.model_copy(update=models)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_path = _yaml_file.get() or os.environ.get("GENWORKER_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if yaml_path:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=Path(yaml_path)))
        return tuple(sources)


def _under(root: Path, path: str) -> str:
    candidate = Path(path).expanduser()
    return str(candidate if candidate.is_absolute() else root / candidate)


def state_paths(settings: Settings) -> dict[str, str]:
    """Where these settings write state, for the line each state-writing command prints at start."""
    paths = {"data_dir": settings.data_dir}
    if settings.queue.backend == "sqlite":
        paths["queue"] = settings.queue.sqlite_path
    else:
        paths["queue"] = f"redis ({settings.queue.redis_mode})"
    if settings.store.backend == "local":
        paths["artifacts"] = settings.store.local_root
    else:
        paths["artifacts"] = f"s3 bucket {settings.store.s3_bucket}"
    paths["models"] = settings.models.tiny_models_dir
    return paths


def load_settings(config: str | Path | None = None, **overrides: Any) -> Settings:
    """Build settings from an optional YAML file, the environment and explicit overrides."""
    token = _yaml_file.set(str(config) if config is not None else None)
    try:
        return Settings(**overrides)
    finally:
        _yaml_file.reset(token)


def settings_env(values: Settings | Mapping[str, Any]) -> dict[str, str]:
    """The ``GENWORKER_*`` variables from which a child process builds these values back.

    ``values`` is a whole ``Settings`` or a nested mapping of some fields, e.g.
    ``{"queue": {"backend": "redis"}, "worker": {"preload": ["tiny-wan"]}}`` →
    ``{"GENWORKER_QUEUE__BACKEND": "redis", "GENWORKER_WORKER__PRELOAD": '["tiny-wan"]'}``. Sections
    nest with ``__``; lists and dicts are JSON; secrets are written in clear (the environment is how
    a child receives them). ``None`` is left out: no environment value parses back to None, and every
    optional field defaults to None. A name that is no field raises ``ValueError``: a misspelt
    variable would otherwise be ignored by the child without a word.
    """
    env: dict[str, str] = {}
    _flatten(Settings, values, ENV_PREFIX, env)
    return env


def _flatten(model: type[BaseModel], values: BaseModel | Mapping[str, Any], prefix: str, env: dict[str, str]) -> None:
    items = (
        dict(values) if isinstance(values, Mapping) else {name: getattr(values, name) for name in model.model_fields}
    )
    for name, value in items.items():
        field = model.model_fields.get(name)
        if field is None:
            raise ValueError(f"{prefix}{name.upper()}: {model.__name__} has no field {name!r}")
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel) and isinstance(value, BaseModel | Mapping):
            _flatten(section, value, f"{prefix}{name.upper()}{_NESTED}", env)
        elif value is not None:
            env[f"{prefix}{name.upper()}"] = _env_value(value)


def _env_value(value: Any) -> str:
    """One value as the environment source parses it back: JSON for containers, plain text else."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=str)
    return str(value)

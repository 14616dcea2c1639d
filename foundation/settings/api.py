"""The ``api`` section of ``Settings`` and its ``inputs``: the HTTP tier and the input images it fetches."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator, model_validator

from foundation.settings.hosts import host_port_entries, is_loopback

__all__ = ["ApiSettings", "InputSettings"]


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
    fast_path: bool = Field(
        default=False,
        description="Polls, creates and the catalog answered in front of the framework's routing and middleware "
        "(the same answers, byte for byte; tests/e2e/test_poll_path.py compares them). Off: every request takes "
        'the framework\'s path. What it buys: docs/benchmarks.md, "Micro-optimizations off by default (issue 48)".',
    )
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

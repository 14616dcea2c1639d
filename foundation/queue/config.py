"""Queue settings (the ``queue`` section of ``Settings``; env ``GENWORKER_QUEUE__*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from foundation.queue.fairness import FairShare

__all__ = ["QueueSettings"]


class QueueSettings(BaseModel):
    backend: Literal["sqlite", "redis"] = Field(
        default="sqlite", description="`sqlite`: one machine (embedded mode); `redis`: a fleet on one Redis."
    )
    sqlite_path: str = Field(
        default="queue.db", description="SQLite queue file (backend `sqlite`); relative: under data_dir."
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description=(
            "`redis://` or `rediss://` (TLS) URL, with optional `user:password@` (ACL) and `/db`. "
            "Mode `cluster`: any node of the cluster (a seed); mode `sentinel`: only scheme, "
            "credentials and db are used (the master's address comes from the sentinels)."
        ),
    )
    redis_mode: Literal["single", "cluster", "sentinel"] = Field(
        default="single",
        description=(
            "`single`: one server (or a proxy); `cluster`: Redis Cluster (redis-py `RedisCluster`; "
            "every atomic step stays in one hash slot); `sentinel`: the master that the sentinels name."
        ),
    )
    cluster_nodes: list[str] = Field(
        default_factory=list,
        description="Mode `cluster`: more seed nodes (`host:port`) besides `redis_url`'s, tried in order.",
    )
    sentinel_addresses: list[str] = Field(
        default_factory=list, description="Mode `sentinel`: the sentinels (`host:port`), at least one."
    )
    sentinel_master: str = Field(default="mymaster", description="Mode `sentinel`: the monitored master's name.")
    sentinel_username: str | None = Field(default=None, description="ACL user on the sentinels, if they need one.")
    sentinel_password: SecretStr | None = Field(default=None, description="Password of the sentinels, if any.")
    redis_username: str | None = Field(
        default=None, description="ACL user; overrides the URL's. None: the URL's (or `default`)."
    )
    redis_password: SecretStr | None = Field(
        default=None, description="Password (ACL user's or `requirepass`); overrides the URL's."
    )
    tls_ca_file: str | None = Field(
        default=None, description="With `rediss://`: CA bundle that signed the server certificate (None: system CAs)."
    )
    tls_cert_file: str | None = Field(default=None, description="With `rediss://`: client certificate (mutual TLS).")
    tls_key_file: str | None = Field(default=None, description="With `rediss://`: the client certificate's key.")
    tls_check_hostname: bool = Field(
        default=True, description="With `rediss://`: check that the server certificate names the host."
    )
    wait_replicas: int | None = Field(
        default=None,
        ge=0,
        description="Redis: replicas that must acknowledge every queue commit (`WAIT`) before it counts: an "
        "acknowledged enqueue, claim or finish then survives a failover. 0: off (asynchronous replication). "
        "Unset: 1 when the deployment has a replica at start (every primary of a Cluster has one), else 0. "
        "Not confirmed within `wait_timeout_ms`: the API answers 503 and the worker backs off.",
    )
    wait_aof: bool = Field(
        default=False,
        description="Redis 7.2+ with `appendonly yes`: also wait until each commit is fsynced to the primary's "
        "AOF (and the `wait_replicas` replicas' AOF) with `WAITAOF`; checked at start.",
    )
    wait_timeout_ms: int = Field(
        default=1000, ge=1, description="Redis: how long a commit waits for `wait_replicas` / `wait_aof`."
    )
    socket_timeout_s: float = Field(
        default=15.0,
        gt=1,
        description="Per-command socket timeout: a dead connection fails fast instead of hanging a worker "
        "(blocking claims wait in slices of 0.25 s, well below it).",
    )
    connect_timeout_s: float = Field(default=5.0, gt=0, description="TCP (and TLS) connect timeout.")
    lease_ttl_s: float = Field(
        default=30.0,
        gt=0,
        description="Lease granted by a claim and renewed by a heartbeat thread; a job is re-delivered only "
        "when its lease lapses (the worker died), never because it is long.",
    )
    max_attempts: int = Field(
        default=3, ge=1, le=100, description="Attempts per job before it fails and goes to the dead-letter stream."
    )
    retry_backoff_s: float = Field(
        default=2.0, ge=0, description="Base of the exponential backoff between attempts after a transient error."
    )
    record_ttl_days: float = Field(
        default=30.0,
        gt=0,
        description="Retention: a finished job (succeeded, failed or canceled) is kept this long after it ended, "
        "record and events, then deleted (Redis: a TTL set by the commit that ends it; SQLite: purged by the "
        "worker's sweeper), and its artifact objects with it (the sweeper). Idempotency keys always last 24 h.",
    )
    newer_record_wait_s: float = Field(
        default=900.0,
        gt=0,
        description="Rolling upgrades: a job whose record a newer version wrote is left to workers of that "
        "version (no attempt used) this long; if none took it by then (the upgrade stalled or was rolled back), "
        "it fails with version_unavailable and is dead-lettered. Set it above the time a rollout takes.",
    )
    consumer_idle_s: float = Field(
        default=3600.0,
        gt=0,
        description="Redis: a consumer of a model's group (one per worker process and hosted model) that holds "
        "no job and has not read for this long is deleted by the sweeper (`XGROUP DELCONSUMER`).",
    )
    redis_wire: bool = Field(
        default=False,
        description="Redis, one server over plain TCP: the API's polls and rate-limit hits go over lean connections "
        "of its own (hiredis packing, one write and one wake-up per round trip) instead of redis-py's asyncio "
        "pipeline. Off: redis-py alone, the reference its tests compare against. What it buys: "
        'docs/benchmarks.md, "Micro-optimizations off by default (issue 48)".',
    )
    sqlite_group_commit: bool = Field(
        default=False,
        description="SQLite: the API's creates that arrive together are written in one transaction, and so one "
        "fsync. Off: each create commits on its own. What it buys: docs/benchmarks.md, "
        '"Micro-optimizations off by default (issue 48)".',
    )
    fair: FairShare = Field(
        default_factory=FairShare,
        description="Fair share by project inside each model pool: weights, caps (`max_running`, `max_queued`) "
        "and per-project overrides; `enabled: false` is plain FIFO (see docs/operators.md).",
    )

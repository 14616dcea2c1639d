"""Every Redis key and stream name the queue uses, in one place, each with why it exists.

Cluster layout: the keys that one atomic operation (a Lua script) touches share a hash slot through
the per-model hash tag ``{m:<model>}``: the model's job stream, its delayed-retry zset, its events and
dead-letter streams, and the job records (and per-job event streams) of that model. Keys that are only
written one at a time (the id → model index, idempotency keys, project listings, worker heartbeats)
live in other slots and are never part of a multi-key command.

Prefix ``gw:`` keeps the namespace apart from anything else sharing the Redis database.
"""

from __future__ import annotations

import re

__all__ = [
    "CONSUMER_GROUP",
    "IDEMPOTENCY_TTL_S",
    "MODELS",
    "PROJECT_JOBS_PATTERN",
    "REAPER_CONSUMER",
    "RECORD_TTL_MS",
    "RECORD_TTL_S",
    "WORKERS",
    "claims",
    "dead_stream",
    "delayed_zset",
    "events_stream",
    "fair_parked",
    "fair_prefix",
    "fair_projects",
    "fair_queue",
    "idempotency",
    "job_events",
    "job_events_of",
    "job_model_index",
    "job_progress",
    "job_progress_of",
    "job_record",
    "job_record_prefix",
    "job_stream",
    "job_stream_seq",
    "pool_tag",
    "project_jobs",
    "running_set",
    "worker_heartbeat",
]

# Model ids and job ids become parts of key names: braces would break the hash tag, spaces and
# control characters would make keys unreadable in redis-cli. Catalog ids are far narrower than this.
_SAFE = re.compile(r"^[A-Za-z0-9._:/@+=-]{1,200}$")

# The consumer group of every job stream. Workers are its consumers, named by worker id.
CONSUMER_GROUP = "workers"

# The consumer that the reaper's ``XCLAIM`` moves lapsed entries to while they are re-queued or dead-lettered.
# A shared name on purpose: two reapers racing on one entry are told apart by the record's ``rev``.
REAPER_CONSUMER = "_reaper"

# How long an idempotency key maps to its job (the HTTP contract's retry window).
IDEMPOTENCY_TTL_S = 24 * 3600

# How long a terminal job (its record and its own events) is kept after it ended, unless the queue is
# opened with another ``record_ttl_s`` (the setting ``queue.record_ttl_days``).
RECORD_TTL_S = 30 * 24 * 3600
RECORD_TTL_MS = RECORD_TTL_S * 1000

# Set of every model that ever had a job stream: how global reads (events, dead letters) find streams.
MODELS = "gw:models"

# Zset of worker ids (score: last beat, ms since epoch); the live ones still have a heartbeat key.
WORKERS = "gw:workers"


def _checked(value: str, what: str) -> str:
    if not _SAFE.match(value):
        raise ValueError(f"{what} {value!r} cannot be used in a queue key (allowed: [A-Za-z0-9._:/@+=-], 1-200)")
    return value


def pool_tag(model: str) -> str:
    """The hash tag shared by every key of one model's pool (one Redis Cluster slot per model)."""
    return "{m:" + _checked(model, "model id") + "}"


def job_stream(model: str) -> str:
    """Stream of claimable job entries of one model (field ``payload``: JSON, see the protocol doc).

    Invariant kept by every script: an entry is either not yet delivered or pending (in the PEL) for
    exactly one consumer; acknowledging always deletes it, so ``XLEN - pending`` is the waiting count.
    """
    return f"gw:{pool_tag(model)}:stream"


def job_stream_seq(model: str) -> str:
    """Count of the entries ever added to the model's job stream: ``commit.lua`` INCRs it with each XADD
    (and ``lua/fair.lua`` with each hand-over, naming it as the stream's name + ``:seq``) and stores the
    value on the job's record as ``seq``; ``position.lua`` reads it (one GET) where it would
    otherwise need ``XINFO STREAM``, whose reply carries the first and last entries whole and grows slower
    with the backlog. Never expires (one small key per model)."""
    return f"gw:{pool_tag(model)}:stream:seq"


def delayed_zset(model: str) -> str:
    """Jobs waiting for a retry backoff (score: due time, ms since epoch; member: job id).

    Moved back into ``job_stream`` by the claim path once due.
    """
    return f"gw:{pool_tag(model)}:delayed"


def fair_prefix(model: str) -> str:
    """What every fair-share key of the model's pool starts with (``lua/fair.lua`` appends the rest, all in
    the pool's slot): ``projects`` (zset project → pass), ``q:<project>`` (zset of the project's parked job
    ids, FIFO), ``parked`` (zset of every parked job id → parked at, ms), ``run:<project>`` and
    ``wait:<project>`` (sets of the project's jobs running and queued in the stream: the caps),
    ``resting`` (zset project → pass of projects whose queue ran dry owing part of their last turn),
    ``clock`` (the pool's virtual clock) and
    ``seq`` (the parking order). The scripts build the per-project names, which they learn only then."""
    return f"gw:{pool_tag(model)}:fair:"


def fair_parked(model: str) -> str:
    """Every job of the pool waiting in the fair order (``fair_prefix`` + ``parked``): depth and oldest age."""
    return f"{fair_prefix(model)}parked"


def fair_projects(model: str) -> str:
    """Projects of the pool in fair order (``fair_prefix`` + ``projects``): zset project → pass."""
    return f"{fair_prefix(model)}projects"


def fair_queue(model: str, project: str) -> str:
    """A project's parked jobs in the pool, FIFO (``fair_prefix`` + ``q:<project>``)."""
    return f"{fair_prefix(model)}q:{_checked(project, 'project')}"


def events_stream(model: str) -> str:
    """Every status change of the model's jobs, in order (capped with ``MAXLEN ~``)."""
    return f"gw:{pool_tag(model)}:events"


def dead_stream(model: str) -> str:
    """Dead letters of the model: jobs out of attempts and unreadable entries, with a reason."""
    return f"gw:{pool_tag(model)}:dead"


def running_set(model: str) -> str:
    """Ids of the model's jobs whose record is ``running`` (kept by ``commit.lua``): how the sweep finds
    a running record that lost its lease (no pending entry), which no reaper would ever see."""
    return f"gw:{pool_tag(model)}:running"


def claims(model: str) -> str:
    """Hash: consumer → its last claim call's token, entry and job id (``claim.lua``), so a call re-sent
    after its reply was lost (a cut connection, redis-py's retry) answers what the first call did
    instead of delivering a second job. One field per consumer; removed with the consumer."""
    return f"gw:{pool_tag(model)}:claims"


def job_record(model: str, job_id: str) -> str:
    """Hash holding one job: ``record`` (GenerationRecord JSON) plus the fields Lua checks cheaply
    (``status``, ``attempt``, ``rev``, ``entry``, ``cancel``, ``released``, ``model``, and ``seq``: its
    entry's place in the stream's count of XADDs, for ``position.lua``). Expires ``record_ttl`` after
    the job ended (``commit.lua``), with its ``job_events``."""
    return f"{job_record_prefix(model)}{_checked(job_id, 'job id')}"


def job_record_prefix(model: str) -> str:
    """What every ``job_record`` of the model starts with: ``claim.lua`` appends the job id of the entry
    it delivers (a key it learns only then), so the hash is read in the same call, in the same slot."""
    return f"gw:{pool_tag(model)}:job:"


def job_events(model: str, job_id: str) -> str:
    """The job's own event stream (same ids as its entries in ``events_stream``): cheap per-job reads."""
    return job_events_of(job_record(model, job_id))


def job_events_of(job_hash: str) -> str:
    """``job_events`` of the job whose hash is ``job_hash`` (``claim.lua`` appends the same suffix)."""
    return f"{job_hash}:events"


def job_progress(model: str, job_id: str) -> str:
    """The job's progress log: one entry per stage/progress write of a running attempt (fields
    ``attempt, stage, progress, at``), ``MAXLEN ~ PROGRESS_NOTES_CAP``. Written by the fenced progress
    commit itself; each write sets its TTL to ``record_ttl``, so it outlives the job by at most that.
    What ``GET /v1/generations/{id}/events`` replays between status events."""
    return job_progress_of(job_record(model, job_id))


def job_progress_of(job_hash: str) -> str:
    """``job_progress`` of the job whose hash is ``job_hash``."""
    return f"{job_hash}:progress"


# A job's progress log keeps about this many entries (a stage write per stage, then at most a few
# progress writes a second while denoising): a long job keeps its latest ones.
PROGRESS_NOTES_CAP = 2000


def job_model_index(job_id: str) -> str:
    """job id → model (plain string), written before the record: the API looks records up by id alone.

    In another slot than the job, so no script can expire it with the job: the retention sweep
    (``redis_retention``) deletes it once the job is gone."""
    return f"gw:jobmodel:{_checked(job_id, 'job id')}"


def idempotency(project: str, key: str) -> str:
    """Idempotency key of a project → JSON ``{"job_id", "request_hash"}``, ``SET NX`` with a 24 h TTL.

    The client's key is used verbatim: Redis keys are binary-safe and only the first ``{...}`` (the
    project) is the hash tag, whatever braces the client's key holds.
    """
    return f"gw:idem:{{{_checked(project, 'project')}}}:{key}"


def project_jobs(project: str) -> str:
    """Zset of a project's job ids (score: created_at, ms since epoch): ``list_jobs``, newest first.

    Members whose job expired are removed by the retention sweep (``redis_retention``)."""
    return f"gw:project:{{{_checked(project, 'project')}}}:jobs"


# SCAN pattern matching every ``project_jobs`` key (the retention sweep walks them).
PROJECT_JOBS_PATTERN = "gw:project:*:jobs"


def worker_heartbeat(worker_id: str) -> str:
    """A worker's last ``WorkerHeartbeat`` JSON, with a TTL: it vanishes when the worker stops beating."""
    return f"gw:worker:{_checked(worker_id, 'worker id')}"

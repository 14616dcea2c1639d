"""The Lua scripts of the Redis backend (``foundation/queue/redis/lua/*.lua``) and the KEYS and ARGV of each.

This module is the only place that lays out a script call; the rest of the backend calls the typed
methods of ``Scripts``. Every script touches keys of one model's pool only (one Cluster slot).

================  ==========================================  =============================================
script            KEYS                                        ARGV
================  ==========================================  =============================================
``commit.lua``    1 job hash, 2 job stream, 3 delayed zset,   1 plan JSON (``Plan`` fields plus ``group``,
                  4 events stream, 5 job events stream,       ``events_maxlen``, ``at``, ``record_ttl_ms``,
                  6 dead-letter stream, 7 running set,        ``notes_cap``, ``format`` with a record; a
                  8 job stream XADD counter, 9 job progress   ``None`` field is left out), 2 new record
                  log                                         JSON (``''``: keep)
``claim.lua``     per model i (in order): 5i-4 job stream,    1 group, 2 consumer, 3 lease ms ('': no
                  5i-3 delayed zset, 5i-2 events stream,      start), 4 events MAXLEN, 5 the call's
                  5i-1 running set, 5i claims hash            token, 6 record format read; per model i:
                                                              2i+5 job hash prefix, 2i+6 model
``renew.lua``     1 job hash, 2 job stream                    1 group, 2 consumer, 3 attempt, 4 entry id
``scan.lua``      1 job stream, 2 delayed zset                1 group
``depth.lua``     1 job stream, 2 delayed zset                1 group
``position.lua``  1 job hash, 2 job stream, 3 delayed zset,   1 group, 2 job id
                  4 job stream XADD counter
``consumers.lua`` 1 job stream, 2 claims hash                 1 group, 2 minimum idle ms
``drop.lua``      1 job stream, 2 dead-letter stream          1 group, 2 entry id ('': none), 3 MAXLEN,
                                                              4.. dead-letter field/value pairs (none: none)
================  ==========================================  =============================================

Python builds every new record with pydantic (``records``) and every change as a ``redis_plans.Plan``;
``commit.lua`` is the atomic gate that checks the record's ``rev`` (optimistic check-and-set), the
fencing fields and the lifecycle table, then writes the record, moves the stream entry, and appends
the event and the dead letter. ``claim.lua`` delivers an entry and reads its job in one call (the
job hash and its events stream are the keys a script builds itself: their names are known only once
the entry is read, and their prefix carries the pool's hash tag); a plain queued job it also starts
there, as the start plan would (``Started``), so a claim needs no second round trip. Scripts run
with ``EVALSHA`` (``register_script``), reloaded on ``NOSCRIPT``.
"""

from __future__ import annotations

import functools
import itertools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

import redis.exceptions as rx
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from foundation.core.contract import GenerationRecord, utcnow
from foundation.queue import keys, records
from foundation.queue.fairness import FairShare
from foundation.queue.redis.durability import Durability
from foundation.queue.redis.plans import Plan
from foundation.queue.redis.plans import create as create_plan
from foundation.queue.redis.round_trip import RoundTrips, lean

__all__ = [
    "Delivery",
    "Due",
    "Idle",
    "Reply",
    "Scan",
    "Scripts",
    "Started",
    "commit_call",
    "commit_reply",
    "lua_source",
]


# The shared pieces each script gets prepended (a script cannot call another).
_PRELUDES = {"commit": ("transitions", "fair"), "claim": ("isotime", "fair")}


def lua_source(name: str) -> str:
    """A script's source, after its preludes: ``commit.lua`` gets the lifecycle table of
    ``transitions.lua``, ``claim.lua`` the clock formatting of ``isotime.lua``."""
    folder = resources.files("foundation.queue.redis") / "lua"
    parts = [*_PRELUDES.get(name, ()), name]
    return "\n".join((folder / f"{part}.lua").read_text(encoding="utf-8") for part in parts)


@dataclass(frozen=True)
class Reply:
    """``commit.lua``'s answer."""

    kind: str  # ok | applied | exists | missing | conflict | fenced | illegal
    entry: str = ""  # the job's stream entry after the commit ('' when it has none)

    @property
    def done(self) -> bool:
        """The plan is in effect: applied now (``ok``) or by an earlier run of the same plan (``applied``)."""
        return self.kind in ("ok", "applied")


@dataclass(frozen=True)
class Delivery:
    """``claim.lua``'s answer: an entry of ``model`` now pending for the consumer, and its job hash as
    read with it (``record`` None: no such hash, or a payload the script could not read a job id from)."""

    model: str
    entry: str
    fields: dict[str, str]
    record: str | None
    rev: str | None
    job_entry: str | None
    released: str | None
    record_format: str | None  # the job hash's ``format`` (None: absent, as in every record before formats)


@dataclass(frozen=True)
class Started:
    """``claim.lua``'s answer when it also started the job (``redis_plans.start``, applied in the same
    call): the entry of ``model``, now pending for the consumer, and the job hash as the start left it."""

    model: str
    entry: str
    job_id: str
    record: str  # the running record's JSON
    rev: int
    released: int


@dataclass(frozen=True)
class Due:
    """``claim.lua``'s answer when ``model``'s delayed retries are due: promote them, then claim again."""

    model: str


@dataclass(frozen=True)
class Idle:
    """``claim.lua``'s answer when no stream holds anything new for the group."""

    cursors: dict[str, str]  # per model, the group's last-delivered id: an XREAD from it wakes on the next


@dataclass(frozen=True)
class Scan:
    """``scan.lua``'s answer: what one model's pool holds, on the server's clock."""

    now_ms: int
    oldest: str  # id of the oldest entry not yet delivered, '' when none
    due: int  # delayed retries whose backoff is over


# The plan's fields that go into the spec (the record travels as ARGV[2]).
_SPEC_FIELDS = tuple(f.name for f in fields(Plan) if f.name not in ("record", "raw_record"))


@functools.lru_cache(maxsize=1024)
def _pool_keys(model: str) -> tuple[str, ...]:
    """The model's own keys of ``commit.lua`` (KEYS 2, 3, 4, 6, 7, 8), built and checked once per model."""
    return (
        keys.job_stream(model),
        keys.delayed_zset(model),
        keys.events_stream(model),
        keys.dead_stream(model),
        keys.running_set(model),
        keys.job_stream_seq(model),
    )


@functools.lru_cache(maxsize=1024)
def _claim_pool(model: str) -> tuple[tuple[str, ...], str]:
    """``claim.lua``'s KEYS for one model (stream, delayed, events, running, claims) and its job hash
    prefix, built and checked once per model, not on every claim and every wait slice."""
    stream, delayed, events, _dead, running, _seq = _pool_keys(model)
    return (stream, delayed, events, running, keys.claims(model)), keys.job_record_prefix(model)


@functools.lru_cache(maxsize=4096)
def _commit_keys(model: str, job_id: str) -> tuple[str, ...]:
    """``commit.lua``'s KEYS for one job: the same for every commit of the job (its claim, its
    progress writes, its end), so they are built and checked once, not on every call; the job's own
    keys are its hash's name and a suffix (``keys.job_events``, ``keys.job_progress``)."""
    stream, delayed, events, dead, running, seq = _pool_keys(model)
    job = keys.job_record(model, job_id)
    return (job, stream, delayed, events, keys.job_events_of(job), dead, running, seq, keys.job_progress_of(job))


def commit_call(
    plan: Plan,
    *,
    events_maxlen: int,
    record_ttl_ms: int,
    record_format: int = records.RECORD_FORMAT,
    fair: FairShare | None = None,
) -> tuple[list[str], list[str]]:
    """``commit.lua``'s KEYS and ARGV for ``plan`` (the table above): every commit, a create included,
    is laid out here. A record this version built is stored with ``record_format`` beside it; ``fair``
    (default: on, no overrides): whether a re-queue parks in the fair order, and the weights and caps
    that handing a parked job to the stream applies."""
    fair = fair or FairShare()
    spec: dict[str, Any] = {"group": keys.CONSUMER_GROUP, "events_maxlen": str(events_maxlen)}
    spec["at"] = utcnow().isoformat()
    spec["record_ttl_ms"] = record_ttl_ms
    spec["notes_cap"] = keys.PROGRESS_NOTES_CAP
    spec["fair_base"], spec["job_prefix"] = keys.fair_prefix(plan.model), keys.job_record_prefix(plan.model)
    spec["fair_on"], spec["fair_shares"] = fair.enabled, fair.shares
    spec["fair_weight"], spec["fair_max_running"] = fair.weight, fair.max_running
    for name in _SPEC_FIELDS:
        value = getattr(plan, name)
        # cjson turns JSON null into a truthy sentinel: absent keys are the only safe "none".
        if value is not None:
            spec[name] = value
    record_json = plan.raw_record or ""
    if plan.record is not None:
        record_json = plan.record.model_dump_json()
        spec["format"] = record_format
    return list(_commit_keys(plan.model, plan.job_id)), [json.dumps(spec), record_json]


class Scripts:
    """The registered scripts of one client, one typed method per script."""

    def __init__(
        self,
        client: Any,
        events_maxlen: int,
        durability: Durability | None = None,
        *,
        record_ttl_ms: int = keys.RECORD_TTL_MS,
        record_format: int = records.RECORD_FORMAT,
        fair: FairShare | None = None,
    ) -> None:
        self._client = client
        self.fair = fair or FairShare()  # weights and caps the claim's fair pick applies (lua/fair.lua)
        # Claims and commits skip redis-py's pipeline (``redis_round_trip``) on a pooled single server.
        self._trips = RoundTrips(client) if lean(client) else None
        self._events_maxlen = events_maxlen
        self._record_ttl_ms = record_ttl_ms  # retention of terminal jobs (commit.lua step 9)
        self.record_format = record_format  # written beside every record, the newest claim.lua starts
        self._durability = durability or Durability()  # settled at the first commit (``durability``)
        self._commit: Script = client.register_script(lua_source("commit"))
        self._renew: Script = client.register_script(lua_source("renew"))
        self._claim: Script = client.register_script(lua_source("claim"))
        self._scan: Script = client.register_script(lua_source("scan"))
        self._depth: Script = client.register_script(lua_source("depth"))
        self._position: Script = client.register_script(lua_source("position"))
        self._drop: Script = client.register_script(lua_source("drop"))
        self._consumers: Script = client.register_script(lua_source("consumers"))
        # Claim call tokens: unique per process (a random prefix) and per call (a counter).
        self._claim_prefix = f"{uuid.uuid4().hex[:12]}-"
        self._claim_count = itertools.count()

    def commit(self, plan: Plan, *, before: Sequence[tuple[Any, ...]] = ()) -> Reply:
        """Apply ``plan``; ``illegal`` (the lifecycle table refused the change) is a bug and raises.

        ``before``: idempotent commands (e.g. ``("SET", key, value)``) sent ahead of the commit in the
        same pipeline, so they take effect first and cost no round trip of their own."""
        script_keys, args = commit_call(
            plan,
            events_maxlen=self._events_maxlen,
            record_ttl_ms=self._record_ttl_ms,
            record_format=self.record_format,
            fair=self.fair,
        )
        return commit_reply(self._run_commit(plan.job_id, script_keys, args, before), plan.job_id)

    def create(self, record: GenerationRecord, *, before: Sequence[tuple[Any, ...]] = ()) -> Reply:
        """Enqueue ``record``: ``commit`` of its create plan (``redis_plans.create``; parked in the fair order
        when fair share is on, ``full`` past its project's ``max_queued``)."""
        return self.commit(create_plan(record, self.fair), before=before)

    def durability(self) -> Durability:
        """What every commit waits for; an unset ``wait_replicas`` is settled here once, by asking the
        server (two threads that both ask get the same answer)."""
        if self._durability.replicas is None:
            self._durability = self._durability.settled(self._client)
        return self._durability

    def _run_commit(
        self, job_id: str, script_keys: list[str], args: list[str], before: Sequence[tuple[Any, ...]] = ()
    ) -> Any:
        """Run ``commit.lua`` after the commands ``before``; with durability on, in one round trip with the
        wait that covers it (``redis_durability``). The wait is checked only when the commit wrote something."""
        durability = self.durability()
        if not (self._trips or durability.enabled or before):
            return self._commit(keys=script_keys, args=args)
        call = ("EVALSHA", self._commit.sha, len(script_keys), *script_keys, *args)
        for loaded in (False, True):
            try:
                replies = self._commit_round_trip(durability, before, call, script_keys[0])
            except NoScriptError:
                if loaded:
                    raise
                # A server that lost its script cache (a restart, a promoted replica): load it, send
                # again. The commit did not run, a second run of a plan is safe anyway, and the
                # commands before it are idempotent.
                self._client.script_load(self._commit.script)
                continue
            raw = replies[len(before)]
            if durability.enabled and str(raw[0]) in ("ok", "applied", "exists"):
                durability.check(replies[-1], job_id)
            return raw
        raise AssertionError("unreachable")

    def _commit_round_trip(
        self, durability: Durability, before: Sequence[tuple[Any, ...]], call: tuple[Any, ...], key: str
    ) -> list[Any]:
        """The replies of ``before``, the commit ``call`` and the durability wait (when on), one round trip."""
        if self._trips is not None:
            wait = [durability.wait_command()] if durability.enabled else []
            return self._trips.send([*before, call, *wait])
        pipe = self._client.pipeline(transaction=False)
        for command in before:
            pipe.execute_command(*command)
        pipe.execute_command(*call)  # not pipe.evalsha: a cluster pipeline blocks that method, not the command
        if durability.enabled:
            durability.queue_wait(pipe, self._client, key)
        return pipe.execute()  # type: ignore[no-any-return]

    def claim(
        self,
        models: Sequence[str],
        consumer: str,
        *,
        lease_ms: int | None = None,
        wake_from: Idle | None = None,
        block_ms: int = 0,
        token: str | None = None,
    ) -> Started | Delivery | Due | Idle:
        """Deliver the next new entry of the first of ``models`` (in this order) that has one to
        ``consumer``, with its job hash (``claim.lua``): ``Started`` (``lease_ms`` given and the job a
        plain queued one: started in the same call, under that lease), a ``Delivery`` (for the caller
        to start or judge), ``Due`` (promote that model's due retries first) or ``Idle`` (nothing new).
        Several models only on one server (not Cluster).

        ``wake_from`` (the last ``Idle``) and ``block_ms`` > 0: first wait up to ``block_ms`` for a new
        entry past its cursors (``XREAD BLOCK``, which delivers nothing), pipelined with the claim. A
        blocked client's later commands wait in its input buffer until the block ends, so the server
        runs the claim the moment the read returns: a woken worker gets the entry and its job in the
        same round trip instead of waking, then asking (an idle wake-up costs several times a
        back-to-back round trip). A wait that times out claims all the same (and finds nothing, or an
        entry the read did not see).

        ``token`` (default: a new one) names this call: a re-send of it (its reply lost, redis-py's
        retry) answers with the same entry and job instead of a second one (``claim.lua``)."""
        script_keys: list[str] = []
        args: list[str] = [keys.CONSUMER_GROUP, consumer, "" if lease_ms is None else str(lease_ms)]
        args += [str(self._events_maxlen), token or f"{self._claim_prefix}{next(self._claim_count)}"]
        args.append(str(self.record_format))
        args += [self.fair.shares_json, str(self.fair.weight), str(self.fair.max_running)]
        for model in models:
            pool_keys, prefix = _claim_pool(model)
            script_keys += pool_keys
            args += [prefix, model, keys.fair_prefix(model)]
        read: tuple[Any, ...] = ()
        if wake_from is not None and block_ms > 0:
            streams = script_keys[::5]  # each model's first key: its job stream
            cursors = [wake_from.cursors[m] for m in models]
            read = ("XREAD", "COUNT", 1, "BLOCK", block_ms, "STREAMS", *streams, *cursors)
        try:
            reply = self._run_claim(read, script_keys, args)
        except (rx.ConnectionError, rx.TimeoutError):
            # The reply may be lost after the script ran (a job delivered, even started, for us): the
            # same call again, same token, answers with that job (a new call would take a second one
            # and leave the first to the reaper). An outage fails this second try as well.
            reply = self._run_claim(read, script_keys, args)
        kind = str(reply[0])
        if kind == "started":
            _, entry, job_id, record, rev, released, index = reply
            return Started(models[int(index) - 1], str(entry), str(job_id), str(record), int(rev), int(released))
        if kind == "due":
            return Due(models[int(reply[1]) - 1])
        if kind == "none":
            return Idle({model: str(cursor) for model, cursor in zip(models, reply[1:], strict=True)})
        flat = reply[2] or []
        fields = {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
        record, rev, job_entry, released = reply[3:7]
        return Delivery(models[int(reply[7]) - 1], str(reply[1]), fields, record, rev, job_entry, released, reply[8])

    def _run_claim(self, wait: tuple[Any, ...], script_keys: list[str], args: list[str]) -> Any:
        """``claim.lua``'s reply; with a ``wait`` (a read that delivers nothing), run in one round trip after it."""
        if not (wait or self._trips):
            return self._claim(keys=script_keys, args=args)
        call = ("EVALSHA", self._claim.sha, len(script_keys), *script_keys, *args)
        try:
            if self._trips is not None:
                return self._trips.send([wait, call] if wait else [call])[-1]
            pipe = self._client.pipeline(transaction=False)
            pipe.execute_command(*wait)
            pipe.execute_command(*call)
            return pipe.execute()[1]
        except NoScriptError:
            # The server lost its script cache (a restart, a promoted replica): the wait delivered
            # nothing, so run the script now, without it (the call loads it); the caller waits next time.
            return self._claim(keys=script_keys, args=args)

    def renew(self, model: str, job_id: str, *, consumer: str, attempt: int, entry: str) -> bool:
        """Reset the lease (the entry's idle time); False when the claim is stale."""
        reply = self._renew(
            keys=[keys.job_record(model, job_id), keys.job_stream(model)],
            args=[keys.CONSUMER_GROUP, consumer, attempt, entry],
        )
        return bool(int(reply))

    def scan(self, model: str) -> Scan:
        now_ms, oldest, due = self._scan(
            keys=[keys.job_stream(model), keys.delayed_zset(model), keys.fair_parked(model)],
            args=[keys.CONSUMER_GROUP],
        )
        return Scan(now_ms=int(now_ms), oldest=str(oldest or ""), due=int(due))

    def scan_all(self, models: Sequence[str]) -> list[Scan]:
        """``scan`` of each model, in one pipeline (one round trip on one server)."""
        for loaded in (False, True):
            pipe = self._client.pipeline(transaction=False)
            for model in models:
                script_keys = [keys.job_stream(model), keys.delayed_zset(model), keys.fair_parked(model)]
                pipe.execute_command("EVALSHA", self._scan.sha, 3, *script_keys, keys.CONSUMER_GROUP)
            try:
                replies = pipe.execute()
            except NoScriptError:
                if loaded:
                    raise
                self._client.script_load(self._scan.script)  # a restart or failover lost it: load, send again
                continue
            return [Scan(now_ms=int(now_ms), oldest=str(oldest or ""), due=int(due)) for now_ms, oldest, due in replies]
        raise AssertionError("unreachable")

    def depth(self, model: str) -> int:
        """Undelivered entries plus delayed retries."""
        return int(
            self._depth(
                keys=[keys.job_stream(model), keys.delayed_zset(model), keys.fair_parked(model)],
                args=[keys.CONSUMER_GROUP],
            )
        )

    def position(self, model: str, job_id: str) -> int | None:
        """0-based place in the model's queue (O(log n), see ``position.lua`` for where it is a lower
        bound); None when the job is not queued."""
        pos = int(
            self._position(
                keys=[
                    keys.job_record(model, job_id),
                    keys.job_stream(model),
                    keys.delayed_zset(model),
                    keys.job_stream_seq(model),
                ],
                args=[keys.CONSUMER_GROUP, job_id, keys.fair_prefix(model)],
            )
        )
        return None if pos < 0 else pos

    def remove_idle_consumers(self, model: str, idle_ms: int) -> int:
        """Delete the group's consumers idle ``idle_ms`` or more that hold nothing; how many."""
        return int(
            self._consumers(keys=[keys.job_stream(model), keys.claims(model)], args=[keys.CONSUMER_GROUP, idle_ms])
        )

    def drop_entry(self, model: str, entry_id: str, dead_fields: dict[str, str] | None = None) -> None:
        """Acknowledge and delete an entry that starts no job, dead-lettering it when fields are given."""
        args: list[str] = [keys.CONSUMER_GROUP, entry_id, str(self._events_maxlen)]
        for name, value in (dead_fields or {}).items():
            args += [name, value]
        self._drop(keys=[keys.job_stream(model), keys.dead_stream(model)], args=args)


def commit_reply(raw: Any, job_id: str) -> Reply:
    """``commit.lua``'s answer; ``illegal`` (the lifecycle table refused the change) is a bug and raises."""
    kind = str(raw[0])
    if kind == "illegal":
        raise RuntimeError(f"commit refused an illegal transition {raw[1]} -> {raw[2]} for job {job_id}")
    if kind not in ("ok", "applied"):
        return Reply(kind)
    return Reply(kind, entry=str(raw[1]))  # raw[2], the event's id, is not needed by any caller

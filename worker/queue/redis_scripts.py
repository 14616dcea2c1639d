"""The Lua scripts of the Redis backend (``worker/queue/lua/*.lua``) and the plans they apply.

Python builds every new record with pydantic (``records``); ``commit.lua`` is the atomic gate that
checks the record's ``rev`` (optimistic check-and-set), the fencing fields and the lifecycle table,
then writes the record, moves the stream entry, and appends the event and the dead letter, all in
the job's hash slot. Scripts run with ``EVALSHA`` (``register_script``), reloaded on ``NOSCRIPT``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.commands.core import Script

from worker.core.contract import GenerationRecord, Status, utcnow
from worker.queue import keys

__all__ = ["Plan", "Scripts", "lua_source"]


def lua_source(name: str) -> str:
    """A script's source; ``commit.lua`` gets the lifecycle table of ``transitions.lua`` prepended."""
    folder = resources.files("worker.queue") / "lua"
    text = (folder / f"{name}.lua").read_text(encoding="utf-8")
    if name == "commit":
        text = (folder / "transitions.lua").read_text(encoding="utf-8") + "\n" + text
    return text


@dataclass
class Plan:
    """One change to one job, applied by ``commit.lua`` only if the stored ``rev`` is still ``rev``."""

    job_id: str
    model: str
    attempt: int
    rev: int = 0
    create: bool = False
    record: GenerationRecord | None = None  # the new record; None keeps the stored one
    status: Status | None = None  # None: no status change
    cancel: bool = False
    fence_attempt: int | None = None  # with fence_entry: refuse unless running at this attempt
    fence_entry: str | None = None
    owned_by: str | None = None  # refuse unless ``ack`` is still pending for this consumer
    ack: str | None = None  # entry to acknowledge and delete
    undelay: bool = False  # drop the job from the delayed zset
    delay_until_ms: int | None = None  # park the job in the delayed zset until then
    payload: str | None = None  # add a new stream entry with this payload
    released_incr: int = 0
    event: str | None = None  # reason of the event to append (None: no event)
    dead: str | None = None  # reason of the dead letter to append (None: none)
    dead_code: str | None = None
    dead_message: str | None = None


@dataclass(frozen=True)
class Reply:
    kind: str  # ok | exists | missing | conflict | fenced | illegal
    entry: str = ""
    event_id: str = ""


class Scripts:
    """The registered scripts of one client."""

    def __init__(self, client: Any, events_maxlen: int) -> None:
        self._events_maxlen = events_maxlen
        self._commit: Script = client.register_script(lua_source("commit"))
        self.renew: Script = client.register_script(lua_source("renew"))
        self.scan: Script = client.register_script(lua_source("scan"))
        self.depth: Script = client.register_script(lua_source("depth"))
        self.position: Script = client.register_script(lua_source("position"))
        self.drop: Script = client.register_script(lua_source("drop"))

    def commit(self, plan: Plan) -> Reply:
        spec: dict[str, Any] = {
            "job_id": plan.job_id,
            "model": plan.model,
            "attempt": plan.attempt,
            "rev": plan.rev,
            "create": plan.create,
            "cancel": plan.cancel,
            "undelay": plan.undelay,
            "released_incr": plan.released_incr,
            "group": keys.CONSUMER_GROUP,
            "events_maxlen": str(self._events_maxlen),
            "at": utcnow().isoformat(),
        }
        optional = {
            "status": plan.status.value if plan.status else None,
            "fence_attempt": plan.fence_attempt,
            "fence_entry": plan.fence_entry,
            "owned_by": plan.owned_by,
            "ack": plan.ack,
            "delay_until_ms": str(plan.delay_until_ms) if plan.delay_until_ms is not None else None,
            "payload": plan.payload,
            "event": plan.event,
            "dead": plan.dead,
            "dead_code": plan.dead_code,
            "dead_message": plan.dead_message,
        }
        # cjson turns JSON null into a truthy sentinel: absent keys are the only safe "none".
        spec.update({k: v for k, v in optional.items() if v is not None})
        record_json = plan.record.model_dump_json() if plan.record is not None else ""
        script_keys = [
            keys.job_record(plan.model, plan.job_id),
            keys.job_stream(plan.model),
            keys.delayed_zset(plan.model),
            keys.events_stream(plan.model),
            keys.job_events(plan.model, plan.job_id),
            keys.dead_stream(plan.model),
        ]
        raw = self._commit(keys=script_keys, args=[json.dumps(spec), record_json])
        kind = str(raw[0])
        if kind == "illegal":
            raise RuntimeError(f"commit refused an illegal transition {raw[1]} -> {raw[2]} for job {plan.job_id}")
        if kind != "ok":
            return Reply(kind)
        return Reply(kind, entry=str(raw[1]), event_id=str(raw[2]))

    def drop_entry(self, model: str, entry_id: str, dead_fields: dict[str, str] | None = None) -> None:
        """Acknowledge and delete an entry that starts no job, dead-lettering it when fields are given."""
        args: list[str] = [keys.CONSUMER_GROUP, entry_id, str(self._events_maxlen)]
        for name, value in (dead_fields or {}).items():
            args += [name, value]
        self.drop(keys=[keys.job_stream(model), keys.dead_stream(model)], args=args)

"""``RedisWebhookStore``: the webhook store on the queue's Redis, shared by every API replica and sender.

Every command touches one key, or keys of one hash slot, so the layout holds on Redis Cluster: the
schedule's keys share the slot of ``gw:webhooks:due`` (their hash tag), and the claim and every change
of a due time are one script over them; registering and removing an endpoint are scripts on the endpoints hash and the
project's index, whose names carry the hash's own name as their hash tag (the slot of a name without
braces is that of the whole name).

| key | type | content |
|---|---|---|
| `gw:webhooks:endpoints` | hash | endpoint id → `Endpoint` JSON |
| `{gw:webhooks:endpoints}:project:<project>` | set | the project's endpoint ids (the cap counts them) |
| `{gw:webhooks:endpoints}:indexed:<project>` | string | set once that index holds every endpoint stored before it |
| `gw:webhooks:delivery:<id>` | string; TTL 7 days once finished | `Delivery` JSON |
| `gw:webhooks:log:<endpoint id>` | zset, newest 1000 kept | delivery ids, score = created (ms) |
| `{gw:webhooks:due}:project:<project>` | zset | its pending ids, score = next attempt (ms); a claim: a lease on |
| `{gw:webhooks:due}:projects` | zset | projects with a pending delivery, score = due time of their oldest (ms) |
| `gw:webhooks:due` | zset | pending ids as stored before the schedule per project; moved to theirs as they are sent |
| `gw:webhooks:cursor` | string | id of the last queue event fanned out |
| `gw:webhooks:request:<generation id>` | string; TTL 30 days | `RequestWebhook` JSON: the generation's own webhook |
| `gw:webhooks:origin:<origin id>` | string; TTL 7 days after a write | `Endpoint` JSON: an origin's failure run |
| `gw:webhooks:project-secrets` | hash | project → `ProjectSecret` JSON (the secret sealed) |
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from api.webhooks.models import Delivery, DeliveryState, Endpoint, ProjectSecret, RequestWebhook
from api.webhooks.store import LOG_KEPT, REQUEST_RETENTION, RETENTION, epoch_ms
from foundation.queue.unavailable import redis_unavailable

if TYPE_CHECKING:
    from foundation.queue.redis.connect import RedisClient

__all__ = ["RedisWebhookStore"]

ENDPOINTS = "gw:webhooks:endpoints"
DUE = "gw:webhooks:due"  # the schedule of every project before it was kept per project: drained, never added to
DUE_PROJECTS = "{gw:webhooks:due}:projects"
PROJECT_DUE_PREFIX = "{gw:webhooks:due}:project:"
CURSOR = "gw:webhooks:cursor"
PROJECT_SECRETS = "gw:webhooks:project-secrets"


def project_index_key(project: str) -> str:
    return f"{{{ENDPOINTS}}}:project:{project}"


def indexed_key(project: str) -> str:
    return f"{{{ENDPOINTS}}}:indexed:{project}"


def project_due_key(project: str) -> str:
    return PROJECT_DUE_PREFIX + project


def delivery_key(delivery_id: str) -> str:
    return f"gw:webhooks:delivery:{delivery_id}"


def log_key(endpoint_id: str) -> str:
    return f"gw:webhooks:log:{endpoint_id}"


def request_key(generation_id: str) -> str:
    return f"gw:webhooks:request:{generation_id}"


def origin_key(origin_id: str) -> str:
    return f"gw:webhooks:origin:{origin_id}"


# Keeps a project's entry in the projects zset at the due time of its oldest delivery (gone when none).
_HEAD = """
local function set_head(projects, zkey, project)
  local first = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if first[1] then redis.call('ZADD', projects, first[2], project) else redis.call('ZREM', projects, project) end
end
"""

# KEYS = projects zset, the project's zset, the old shared zset; ARGV = project, mode, due ms, ids...
# mode: 'set' (schedule), 'nx' (schedule unless scheduled: a claim's lease is kept), 'xx' (reschedule only
# if still scheduled), 'remove'. An id still in the old shared zset moves to its project's with its score.
_SET_DUE = (
    _HEAD
    + """
local project, mode, due = ARGV[1], ARGV[2], ARGV[3]
for i = 4, #ARGV do
  local id = ARGV[i]
  local old = redis.call('ZSCORE', KEYS[3], id)
  if old then
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZADD', KEYS[2], 'NX', old, id)
  end
  if mode == 'remove' then redis.call('ZREM', KEYS[2], id)
  elseif mode == 'set' then redis.call('ZADD', KEYS[2], due, id)
  else redis.call('ZADD', KEYS[2], string.upper(mode), due, id) end
end
set_head(KEYS[1], KEYS[2], project)
return 1
"""
)

# KEYS = projects zset, the old shared zset; ARGV = now ms, lease ms, limit, per project, zset prefix, projects
# to skip... Takes due ids across projects (oldest head first, at most `per project` each, the old shared
# zset's first) and moves each a lease ahead in one step, so two senders never both take one delivery.
# Returns id, project pairs (project '' for an id of the old shared zset). The project zsets' names are
# made here from the prefix: they share the hash tag, so the slot, of the keys passed.
_CLAIM = (
    _HEAD
    + """
local now, limit, per = tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4])
local until_ms = now + tonumber(ARGV[2])
local skip, out = {}, {}
for i = 6, #ARGV do skip[ARGV[i]] = true end
local function take(zkey, project, count)
  local ids = redis.call('ZRANGE', zkey, '-inf', now, 'BYSCORE', 'LIMIT', 0, count)
  for _, id in ipairs(ids) do
    redis.call('ZADD', zkey, until_ms, id)
    out[#out + 1] = id
    out[#out + 1] = project
  end
end
take(KEYS[2], '', math.min(per, limit))
for _, project in ipairs(redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE')) do
  local room = math.min(per, limit - #out / 2)
  if room <= 0 then break end
  if not skip[project] then
    local zkey = ARGV[5] .. project
    take(zkey, project, room)
    set_head(KEYS[1], zkey, project)
  end
end
return out
"""
)


# KEYS = endpoints hash, project index, its marker; ARGV = id, JSON, project, cap. The count and the insert
# are one step, so concurrent registrations cannot all pass the cap. The index is built here the first time
# a project registers after it was introduced (endpoints stored before it are counted too).
_ADD_ENDPOINT = """
if redis.call('EXISTS', KEYS[3]) == 0 then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if cjson.decode(all[i + 1])['project'] == ARGV[3] then redis.call('SADD', KEYS[2], all[i]) end
  end
  redis.call('SET', KEYS[3], '1')
end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""

# KEYS = endpoints hash, project index; ARGV = id.
_REMOVE_ENDPOINT = """
redis.call('SREM', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
"""


class RedisWebhookStore:
    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self._claim: Any = client.register_script(_CLAIM)
        self._set_due: Any = client.register_script(_SET_DUE)
        self._add_endpoint: Any = client.register_script(_ADD_ENDPOINT)
        self._remove_endpoint: Any = client.register_script(_REMOVE_ENDPOINT)

    @classmethod
    def from_url(cls, url: str) -> RedisWebhookStore:
        import redis as redis_lib

        return cls(redis_lib.Redis.from_url(url, decode_responses=True))

    # ------------------------------------------------------------------------------------ endpoints
    @redis_unavailable
    def add_endpoint(self, endpoint: Endpoint, *, max_per_project: int) -> bool:
        keys = [ENDPOINTS, project_index_key(endpoint.project), indexed_key(endpoint.project)]
        args = [endpoint.id, endpoint.model_dump_json(), endpoint.project, max_per_project]
        return bool(self._add_endpoint(keys=keys, args=args))

    @redis_unavailable
    def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        raw = self.client.hget(ENDPOINTS, endpoint_id)
        return Endpoint.model_validate_json(str(raw)) if raw else None

    @redis_unavailable
    def list_endpoints(self, project: str | None = None) -> list[Endpoint]:
        raw: dict[str, str] = dict(self.client.hgetall(ENDPOINTS))  # type: ignore[arg-type]
        endpoints = sorted((Endpoint.model_validate_json(v) for v in raw.values()), key=lambda e: (e.created_at, e.id))
        return [e for e in endpoints if project is None or e.project == project]

    @redis_unavailable
    def save_endpoint(self, endpoint: Endpoint) -> None:
        if self.client.hexists(ENDPOINTS, endpoint.id):
            self.client.hset(ENDPOINTS, endpoint.id, endpoint.model_dump_json())

    @redis_unavailable
    def remove_endpoint(self, endpoint_id: str) -> bool:
        endpoint = self.get_endpoint(endpoint_id)
        removed = endpoint is not None and bool(
            self._remove_endpoint(keys=[ENDPOINTS, project_index_key(endpoint.project)], args=[endpoint_id])
        )
        ids: list[str] = list(self.client.zrange(log_key(endpoint_id), 0, -1))  # type: ignore[arg-type]
        for chunk in range(0, len(ids), 500):
            part = ids[chunk : chunk + 500]
            self.client.zrem(DUE, *part)
            if endpoint is not None:
                self._due(endpoint.project, "remove", 0, part)
            self.client.delete(*[delivery_key(i) for i in part])
        self.client.delete(log_key(endpoint_id))
        return removed

    # ----------------------------------------------------------------------------------- deliveries
    @redis_unavailable
    def add_delivery(self, delivery: Delivery) -> bool:
        log = log_key(delivery.endpoint_id)
        if not self.client.set(delivery_key(delivery.id), delivery.model_dump_json(), nx=True):
            # A sender killed right after the SET left the delivery out of the schedule and the log;
            # the fan-out re-runs the event (its cursor did not move) and puts it back (NX: a claim's
            # lease or a later due time is kept).
            existing = self.get_delivery(delivery.id)
            if existing is not None and existing.state is DeliveryState.pending:
                self._due(existing.project, "nx", epoch_ms(existing.created_at), [delivery.id])
                self.client.zadd(log, {delivery.id: epoch_ms(existing.created_at)}, nx=True)
            return False
        self._schedule(delivery)
        self.client.zadd(log, {delivery.id: epoch_ms(delivery.created_at)})
        self._prune(log, delivery.project)
        if delivery.url is not None:  # an origin's log lasts while it is used (an endpoint's, while it exists)
            self.client.expire(log, int(RETENTION.total_seconds()))
        return True

    def _due(self, project: str, mode: str, due_ms: int, ids: list[str]) -> None:
        """Change due times in the project's schedule (``_SET_DUE``'s modes)."""
        keys = [DUE_PROJECTS, project_due_key(project), DUE]
        self._set_due(keys=keys, args=[project, mode, due_ms, *ids])

    def _schedule(self, delivery: Delivery) -> None:
        if delivery.state is DeliveryState.pending:
            due = epoch_ms(delivery.next_attempt_at or delivery.created_at)
            self._due(delivery.project, "set", due, [delivery.id])
        else:
            self._due(delivery.project, "remove", 0, [delivery.id])

    def _prune(self, log: str, project: str) -> None:
        """Drop the log's oldest ids beyond its length, and their records unless still pending."""
        old: list[str] = list(self.client.zrange(log, 0, -LOG_KEPT - 1))  # type: ignore[arg-type]
        for delivery_id in old:
            scheduled = (self.client.zscore(key, delivery_id) for key in (project_due_key(project), DUE))
            if all(score is None for score in scheduled):
                self.client.delete(delivery_key(delivery_id))
                self.client.zrem(log, delivery_id)

    @redis_unavailable
    def get_delivery(self, delivery_id: str) -> Delivery | None:
        raw = self.client.get(delivery_key(delivery_id))
        return Delivery.model_validate_json(str(raw)) if raw else None

    @redis_unavailable
    def list_deliveries(self, endpoint_id: str, limit: int = 50) -> list[Delivery]:
        log = log_key(endpoint_id)
        ids: list[str] = list(self.client.zrevrange(log, 0, limit - 1))  # type: ignore[arg-type]
        found: list[Delivery] = []
        for delivery_id in ids:
            delivery = self.get_delivery(delivery_id)
            if delivery is None:  # expired after its retention
                self.client.zrem(log, delivery_id)
            else:
                found.append(delivery)
        return found

    @redis_unavailable
    def claim_due(
        self,
        now: datetime,
        *,
        lease_s: float,
        limit: int,
        per_project: int | None = None,
        skip: Collection[str] = (),
    ) -> list[Delivery]:
        args = [epoch_ms(now), int(lease_s * 1000), limit, limit if per_project is None else per_project]
        pairs = self._claim(keys=[DUE_PROJECTS, DUE], args=[*args, PROJECT_DUE_PREFIX, *skip])
        claimed: list[Delivery] = []
        for delivery_id, project in zip(pairs[::2], pairs[1::2], strict=True):
            delivery = self.get_delivery(str(delivery_id))
            if delivery is None or delivery.state is not DeliveryState.pending:
                # Its record is gone or finished: nothing to send.
                self.client.zrem(DUE, delivery_id)
                if project:
                    self._due(str(project), "remove", 0, [str(delivery_id)])
            else:
                claimed.append(delivery)
        return claimed

    @redis_unavailable
    def save_delivery(self, delivery: Delivery) -> None:
        ttl = None if delivery.state is DeliveryState.pending else int(RETENTION.total_seconds())
        self.client.set(delivery_key(delivery.id), delivery.model_dump_json(), ex=ttl)
        self._schedule(delivery)

    @redis_unavailable
    def defer(self, deliveries: list[Delivery], until: datetime) -> None:
        by_project: dict[str, list[str]] = {}
        for delivery in deliveries:
            by_project.setdefault(delivery.project, []).append(delivery.id)
        for project, ids in by_project.items():  # XX: one finished meanwhile (left the schedule) stays out of it
            self._due(project, "xx", epoch_ms(until), ids)

    # --------------------------------------------------------------------------------------- cursor
    @redis_unavailable
    def cursor(self) -> str | None:
        raw = self.client.get(CURSOR)
        return str(raw) if raw else None

    @redis_unavailable
    def set_cursor(self, cursor: str) -> None:
        self.client.set(CURSOR, cursor)

    # ------------------------------------------------------------------------------ request webhooks
    @redis_unavailable
    def add_request_webhook(self, hook: RequestWebhook) -> None:
        self.client.set(request_key(hook.generation_id), hook.model_dump_json(), ex=_seconds(REQUEST_RETENTION))

    @redis_unavailable
    def get_request_webhook(self, generation_id: str) -> RequestWebhook | None:
        raw = self.client.get(request_key(generation_id))
        return RequestWebhook.model_validate_json(str(raw)) if raw else None

    @redis_unavailable
    def get_origin(self, origin_id: str) -> Endpoint | None:
        raw = self.client.get(origin_key(origin_id))
        return Endpoint.model_validate_json(str(raw)) if raw else None

    @redis_unavailable
    def save_origin(self, origin: Endpoint) -> None:
        self.client.set(origin_key(origin.id), origin.model_dump_json(), ex=_seconds(RETENTION))

    @redis_unavailable
    def get_project_secret(self, project: str) -> ProjectSecret | None:
        raw = self.client.hget(PROJECT_SECRETS, project)
        return ProjectSecret.model_validate_json(str(raw)) if raw else None

    @redis_unavailable
    def add_project_secret(self, secret: ProjectSecret) -> bool:
        return bool(self.client.hsetnx(PROJECT_SECRETS, secret.project, secret.model_dump_json()))

    @redis_unavailable
    def save_project_secret(self, secret: ProjectSecret) -> None:
        self.client.hset(PROJECT_SECRETS, secret.project, secret.model_dump_json())

    @redis_unavailable
    def list_project_secrets(self) -> list[ProjectSecret]:
        raw: dict[str, str] = dict(self.client.hgetall(PROJECT_SECRETS))  # type: ignore[arg-type]
        return [ProjectSecret.model_validate_json(raw[p]) for p in sorted(raw)]

    @redis_unavailable
    def close(self) -> None:
        self.client.close()


def _seconds(span: timedelta) -> int:
    return int(span.total_seconds())

"""``RedisWebhookStore``: the webhook store on the queue's Redis, shared by every API replica and sender.

Every command touches one key, or keys of one hash slot, so the layout holds on Redis Cluster: the claim
is one script on one key; registering and removing an endpoint are scripts on the endpoints hash and the
project's index, whose names carry the hash's own name as their hash tag (the slot of a name without
braces is that of the whole name).

| key | type | content |
|---|---|---|
| `gw:webhooks:endpoints` | hash | endpoint id → `Endpoint` JSON |
| `{gw:webhooks:endpoints}:project:<project>` | set | the project's endpoint ids (the cap counts them) |
| `{gw:webhooks:endpoints}:indexed:<project>` | string | set once that index holds every endpoint stored before it |
| `gw:webhooks:delivery:<id>` | string; TTL 7 days once finished | `Delivery` JSON |
| `gw:webhooks:log:<endpoint id>` | zset, newest 1000 kept | delivery ids, score = created (ms) |
| `gw:webhooks:due` | zset | pending delivery ids, score = next attempt (ms); a claim moves it a lease ahead |
| `gw:webhooks:cursor` | string | id of the last queue event fanned out |
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from api.webhooks.models import Delivery, DeliveryState, Endpoint
from api.webhooks.store import LOG_KEPT, RETENTION, epoch_ms
from foundation.queue.unavailable import redis_unavailable

if TYPE_CHECKING:
    from foundation.queue.redis.connect import RedisClient

__all__ = ["RedisWebhookStore"]

ENDPOINTS = "gw:webhooks:endpoints"
DUE = "gw:webhooks:due"
CURSOR = "gw:webhooks:cursor"


def project_index_key(project: str) -> str:
    return f"{{{ENDPOINTS}}}:project:{project}"


def indexed_key(project: str) -> str:
    return f"{{{ENDPOINTS}}}:indexed:{project}"


def delivery_key(delivery_id: str) -> str:
    return f"gw:webhooks:delivery:{delivery_id}"


def log_key(endpoint_id: str) -> str:
    return f"gw:webhooks:log:{endpoint_id}"


# KEYS[1] = due zset; ARGV = now ms, lease ms, limit. Takes due members and moves them a lease ahead
# in one step, so two senders never both take one delivery.
_CLAIM = """
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[3]))
local until_ms = tonumber(ARGV[1]) + tonumber(ARGV[2])
for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], until_ms, id) end
return due
"""


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
                self.client.zadd(DUE, {delivery.id: epoch_ms(existing.created_at)}, nx=True)
                self.client.zadd(log, {delivery.id: epoch_ms(existing.created_at)}, nx=True)
            return False
        self._schedule(delivery)
        self.client.zadd(log, {delivery.id: epoch_ms(delivery.created_at)})
        self._prune(log)
        return True

    def _schedule(self, delivery: Delivery) -> None:
        if delivery.state is DeliveryState.pending:
            due = epoch_ms(delivery.next_attempt_at or delivery.created_at)
            self.client.zadd(DUE, {delivery.id: due})
        else:
            self.client.zrem(DUE, delivery.id)

    def _prune(self, log: str) -> None:
        """Drop the log's oldest ids beyond its length, and their records unless still pending."""
        old: list[str] = list(self.client.zrange(log, 0, -LOG_KEPT - 1))  # type: ignore[arg-type]
        for delivery_id in old:
            if self.client.zscore(DUE, delivery_id) is None:
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
    def claim_due(self, now: datetime, *, lease_s: float, limit: int) -> list[Delivery]:
        ids = self._claim(keys=[DUE], args=[epoch_ms(now), int(lease_s * 1000), limit])
        claimed: list[Delivery] = []
        for delivery_id in ids:
            delivery = self.get_delivery(str(delivery_id))
            if delivery is None or delivery.state is not DeliveryState.pending:
                self.client.zrem(DUE, delivery_id)  # its record is gone or finished: nothing to send
            else:
                claimed.append(delivery)
        return claimed

    @redis_unavailable
    def save_delivery(self, delivery: Delivery) -> None:
        ttl = None if delivery.state is DeliveryState.pending else int(RETENTION.total_seconds())
        self.client.set(delivery_key(delivery.id), delivery.model_dump_json(), ex=ttl)
        self._schedule(delivery)

    @redis_unavailable
    def defer(self, delivery_ids: list[str], until: datetime) -> None:
        if delivery_ids:  # XX: a delivery finished meanwhile (left the schedule) stays out of it
            self.client.zadd(DUE, dict.fromkeys(delivery_ids, epoch_ms(until)), xx=True)

    # --------------------------------------------------------------------------------------- cursor
    @redis_unavailable
    def cursor(self) -> str | None:
        raw = self.client.get(CURSOR)
        return str(raw) if raw else None

    @redis_unavailable
    def set_cursor(self, cursor: str) -> None:
        self.client.set(CURSOR, cursor)

    @redis_unavailable
    def close(self) -> None:
        self.client.close()

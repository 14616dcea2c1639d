"""The API's poll path on Redis over ``redis.asyncio``: ``AsyncApiQueue`` for ``RedisQueue``.

- ``poll``: the same keys (``keys``), ``position.lua`` and record parsing as ``RedisQueue``'s reads,
  awaited on the event loop instead of run on a thread: the id → model index once per job and process
  (a job never changes model), then one round trip of ``HGET record`` and ``position.lua`` (it
  answers -1 unless the job is queued).
- ``enqueue``: ``RedisQueue.enqueue`` itself, the backend's one create (idempotency, durability, the
  index writes, ``commit.lua``), on a thread of this queue's own, then the job's place in the queue.

Only a single server (``redis_mode: single``) gets this path (``async_redis_client``); Sentinel and
Cluster clients keep the sync queue behind ``async_api.OffloadedQueue``. The round trips of
``execute_commands`` (every poll and rate-limit hit) take redis-py's asyncio pipeline; with
``queue.redis_wire`` on, over plain TCP, the client is a ``WiredRedis`` and they go over
``wire.RedisWire``, lean connections of its own. What that buys: docs/benchmarks.md, "Micro-optimizations
off by default". Every public method translates "Redis cannot answer" into ``BackendUnavailable``
(``unavailable.redis_unavailable``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from foundation.core.contract import GenerationRecord
from foundation.queue import keys, records
from foundation.queue.base import Polled
from foundation.queue.config import QueueSettings
from foundation.queue.offload import OffloadedCalls
from foundation.queue.redis.backend import RedisQueue
from foundation.queue.redis.connect import redis_client
from foundation.queue.redis.scripts import lua_source
from foundation.queue.redis.wire import RedisWire, WireSettings
from foundation.queue.unavailable import redis_unavailable

__all__ = ["AsyncRedisQueue", "WiredRedis", "async_redis_client", "execute_commands"]

# Connection settings that mean the same to redis.asyncio's connections as to redis-py's.
_PORTABLE = frozenset(
    {"host", "port", "db", "username", "password", "socket_timeout", "socket_connect_timeout", "decode_responses"}
    | {"encoding", "encoding_errors", "client_name"}
    | {"ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_check_hostname"}
)
# A long-lived API process: bound the id → model cache (cleared when full, like ``RedisReads``').
_MODEL_CACHE_MAX = 100_000
# The jobs whose poll commands are kept ready (the ones being polled now; ~1 kB each).
_POLL_CACHE_MAX = 10_000
# Threads that run creates (``RedisQueue.enqueue``, network I/O): as many creates wait on Redis at once.
CREATE_THREADS = 4


class WiredRedis(aioredis.Redis):
    """redis.asyncio's client, whose ``execute_commands`` round trips go over ``wire`` (``RedisWire``,
    lean connections of its own to the same server); every other call is redis-py's."""

    def __init__(self, *, connection_pool: aioredis.ConnectionPool, wire: RedisWire) -> None:
        super().__init__(connection_pool=connection_pool)
        self.auto_close_connection_pool = True  # the pool is this client's own (``async_redis_client``)
        self.wire = wire

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await self.wire.aclose()
        await super().aclose(close_connection_pool)


def async_redis_client(settings: QueueSettings, url: str | None = None) -> aioredis.Redis | None:
    """An asyncio client reaching Redis exactly as ``redis_client(settings, url)`` does (credentials,
    timeouts, TLS), for ``redis_mode: single``; None for Sentinel and Cluster. With ``redis_wire`` on, over
    plain TCP with UTF-8 replies, it is a ``WiredRedis``; else redis-py's connections carry every call."""
    if settings.redis_mode != "single":
        return None
    sync: Any = redis_client(settings, url)  # one server: a redis.Redis
    pool = sync.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _PORTABLE}
    tls = issubclass(pool.connection_class, redis.SSLConnection)
    sync.close()
    utf8 = kwargs.get("encoding", "utf-8") == "utf-8"  # the wire decodes replies as UTF-8
    connection_class = aioredis.SSLConnection if tls else aioredis.Connection
    async_pool = aioredis.ConnectionPool(connection_class=connection_class, **kwargs)
    if not settings.redis_wire or tls or not utf8 or pool.connection_class is not redis.Connection:
        return aioredis.Redis(connection_pool=async_pool)
    return WiredRedis(connection_pool=async_pool, wire=_wire_for(async_pool))


def _wire_for(pool: aioredis.ConnectionPool) -> RedisWire:
    """A ``RedisWire`` to ``pool``'s server, with its connections' settings, packing and retry policy."""
    kw = pool.connection_kwargs
    template: Any = pool.connection_class(**kw)  # never connected: its packer and retry policy
    settings = WireSettings(
        host=kw.get("host", "localhost"),
        port=int(kw.get("port", 6379)),
        db=int(kw.get("db", 0)),
        username=kw.get("username"),
        password=kw.get("password"),
        client_name=kw.get("client_name"),
        socket_timeout_s=kw.get("socket_timeout"),
        connect_timeout_s=kw.get("socket_connect_timeout"),
        encoding_errors=kw.get("encoding_errors", "strict"),
        max_connections=pool.max_connections,
        protocol=int(template.protocol or 2),
    )
    return RedisWire(settings, packer=template, retry=template.retry)


def _position_call(model: str, job_id: str) -> tuple[str, ...]:
    """``position.lua``'s KEYS and ARGV, as ``Scripts.position`` passes them (4 keys, then 3 args)."""
    return (
        keys.job_record(model, job_id),
        keys.job_stream(model),
        keys.delayed_zset(model),
        keys.job_stream_seq(model),
        keys.CONSUMER_GROUP,
        job_id,
        keys.fair_prefix(model),
    )


def _position(raw: Any) -> int | None:
    pos = int(raw)
    return None if pos < 0 else pos


async def _round_trip(client: aioredis.Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` at once on one connection and read their replies, a Redis error as a value: on a
    ``WiredRedis``, over its wire; else in redis-py's pipeline. Either way a connection error drops the
    connection and the connection's retry policy decides whether all of it is sent again."""
    if isinstance(client, WiredRedis):
        return await client.wire.round_trip(commands)
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return await pipe.execute(raise_on_error=False)


async def execute_commands(
    client: aioredis.Redis, commands: Sequence[Sequence[Any]], scripts: Sequence[str]
) -> list[Any]:
    """Send ``commands`` in one round trip and return their replies, raising the first error among
    them. When the server lost its scripts (a restart, a promoted replica), load ``scripts`` and send
    again from the first command refused with NOSCRIPT on: that one did not run, and every command
    before it ran once and is not repeated (a rate-limit hit is counted once; a create's writes before
    ``commit.lua`` are done)."""
    replies = await _round_trip(client, commands)
    for reply in replies:
        if isinstance(reply, Exception):
            break
    else:
        return replies  # the common case, found in one plain loop
    lost = next((i for i, r in enumerate(replies) if isinstance(r, NoScriptError)), None)
    if lost is not None:
        for loaded in await _round_trip(client, [("SCRIPT", "LOAD", source) for source in scripts]):
            if isinstance(loaded, Exception):
                raise loaded
        replies = replies[:lost] + await _round_trip(client, commands[lost:])
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


class AsyncRedisQueue(OffloadedCalls):
    """``AsyncApiQueue`` on one Redis server: polls native, the rest ``RedisQueue``'s own calls on threads."""

    def __init__(self, client: aioredis.Redis, queue: RedisQueue) -> None:
        self._r: Any = client  # redis-py's stubs are loose; replies are read as decoded str
        if not self._r.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError("AsyncRedisQueue needs a client made with decode_responses=True")
        self.queue = queue  # the backend's sync face: its ``enqueue`` is the one create
        self._record_format = queue.record_format  # the newest record format a poll reads (``records.read``)
        self._creates = ThreadPoolExecutor(max_workers=CREATE_THREADS, thread_name_prefix="genworker-create")
        self._executor = self._creates  # and the calls besides poll and create (``OffloadedCalls``)
        self._position_lua = lua_source("position")
        # The script's SHA1, as the server names it once loaded (``SCRIPT LOAD`` on NOSCRIPT).
        self._position_sha = client.register_script(self._position_lua).sha
        self._models: dict[str, str] = {}
        self._polls: dict[str, tuple[tuple[Any, ...], ...]] = {}  # job id → its poll's commands

    @classmethod
    def open(cls, settings: QueueSettings, queue: RedisQueue) -> AsyncRedisQueue | None:
        """This path to ``queue`` (opened from ``settings`` by ``factory.open_queue``); None where it has none."""
        client = async_redis_client(settings)
        if client is None:
            return None
        return cls(client, queue)

    @property
    def client(self) -> aioredis.Redis:
        """The client this queue runs on."""
        return self._r  # type: ignore[no-any-return]

    # ------------------------------------------------------------------------------------ reads
    async def poll(self, job_id: str) -> Polled | None:
        with redis_unavailable:
            mine = self._polls.get(job_id)
            if mine is None:
                mine = await self._poll_commands(job_id)
            if not mine:
                return None
            (raw, fmt, project), pos = await execute_commands(self._r, mine, (self._position_lua,))
        if raw is None:
            return None
        # ``records.read``, as the sync queue's ``get``: a newer version's record or text that is no record
        # raises, naming the project stored beside it.
        record = records.read(raw, records.record_format(fmt), project=project, readable=self._record_format)
        return Polled(record, _position(pos))

    async def _poll_commands(self, job_id: str) -> tuple[tuple[Any, ...], ...]:
        """The poll's two commands for ``job_id`` (none when it has no model index: no such job), kept
        for the next poll of the same job (its keys checked once, not on every poll)."""
        model = await self._model_of(job_id)
        if model is None:
            return ()
        mine = (
            ("HMGET", keys.job_record(model, job_id), "record", "format", "project"),
            ("EVALSHA", self._position_sha, 4, *_position_call(model, job_id)),
        )
        if len(self._polls) >= _POLL_CACHE_MAX:
            self._polls.clear()
        self._polls[job_id] = mine
        return mine

    async def _model_of(self, job_id: str) -> str | None:
        model = self._models.get(job_id)
        if model is None:
            try:
                index = keys.job_model_index(job_id)
            except ValueError:  # not an id this queue could have made a key of: no such job
                return None
            model = (await execute_commands(self._r, [("GET", index)], ()))[0]
            if model is not None:
                self._remember(job_id, model)
        return model

    def _remember(self, job_id: str, model: str) -> None:
        if len(self._models) >= _MODEL_CACHE_MAX:
            self._models.clear()
        self._models[job_id] = model

    # ------------------------------------------------------------------------------------ create
    async def enqueue(
        self, record: GenerationRecord, *, idempotency_key: str | None = None, request_hash: str | None = None
    ) -> Polled:
        """``RedisQueue.enqueue``, the backend's one create (idempotency, durability, the index writes),
        run on a thread of this queue's own; then the job's place in the queue."""
        create = functools.partial(self._enqueue, record, idempotency_key, request_hash)
        polled = await asyncio.get_running_loop().run_in_executor(self._creates, create)
        self._remember(polled.record.id, polled.record.model)  # on the loop, where polls read it
        return polled

    def _enqueue(self, record: GenerationRecord, idempotency_key: str | None, request_hash: str | None) -> Polled:
        result = self.queue.enqueue(record, idempotency_key=idempotency_key, request_hash=request_hash)
        stored = result.record
        position = None if stored.terminal else self.queue.position(stored.id)
        return Polled(stored, position, replayed=result.replayed)

    async def aclose(self) -> None:
        """Close this path's client and threads (``queue`` stays open: its opener closes it)."""
        self._creates.shutdown(wait=False, cancel_futures=True)
        await self._r.aclose(close_connection_pool=True)  # a client given its pool leaves it open otherwise

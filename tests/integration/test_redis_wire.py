"""``redis_wire.RedisWire``, the API's lean connections, on a real redis-server: the same replies as
redis-py's connection for the same commands, one connection reused, the set-up redis-py does (AUTH,
SELECT), and the failures it had (a restart, a timeout, a refused password) as the same exceptions,
so they reach clients as the same 503; TLS keeps redis-py's connection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
import redis.exceptions as rx

from foundation.core.errors import BackendUnavailable
from foundation.queue.config import QueueSettings
from foundation.queue.redis.async_queue import WiredRedis, async_redis_client, execute_commands
from foundation.queue.unavailable import redis_unavailable

# A script and what it answers: the ARGV back, an integer, a nested error reply, a nil in an array.
_ECHO = "return {ARGV[1], 7, redis.error_reply('MINE oops'), false, ARGV[2]}"


def _wired(url: str, **settings: Any) -> WiredRedis:
    client = async_redis_client(QueueSettings(backend="redis", redis_url=url, redis_wire=True, **settings))
    assert isinstance(client, WiredRedis)
    return client


def _run(make: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(make())  # type: ignore[arg-type]


async def _read_by_redis_py(pool: aioredis.ConnectionPool, commands: list[tuple[Any, ...]]) -> list[Any]:
    """The replies redis-py's own connection reads for ``commands`` sent at once (an error as a value)."""
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except rx.ResponseError as e:
                replies.append(e)
        return replies
    finally:
        await pool.release(conn)


def _clients(sync: redis.Redis) -> int:
    return len([c for c in sync.client_list() if c["cmd"] != "client|list"])


def test_replies_are_redis_pys_reply_for_reply(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url)
    sync.set("bytes", b"caf\xe9 \xff")  # not UTF-8: decoded with the client's "replace", as redis-py does
    sync.hset("h", "record", '{"a": 1}')
    sha = sync.script_load(_ECHO)
    commands: list[tuple[Any, ...]] = [
        ("GET", "missing"),
        ("GET", "bytes"),
        ("HGET", "h", "record"),
        ("SET", "k", "v", "EX", 60, "NX"),
        ("INCRBYFLOAT", "f", 1.5),
        ("EVALSHA", sha, 0, "é", b"raw"),
        ("EVALSHA", "0" * 40, 0),  # NOSCRIPT: a NoScriptError in its place
        ("HGET", "bytes", "x"),  # WRONGTYPE: a ResponseError in its place
        ("ZADD", "z", 1, "a"),
        ("ZRANGE", "z", 0, -1, "WITHSCORES"),  # RESP3's shape: [[member, score]], as redis-py gets it
        ("HGETALL", "h"),  # a map
    ]

    async def run() -> None:
        wired = _wired(redis_url)
        try:
            ours = await wired.wire.round_trip(commands)
            sync.delete("k", "f", "z")
            theirs = await _read_by_redis_py(wired.connection_pool, commands)  # the same settings
        finally:
            await wired.aclose()
        assert [_comparable(r) for r in ours] == [_comparable(r) for r in theirs]
        assert ours[1] == "caf\ufffd \ufffd" and isinstance(ours[6], rx.NoScriptError)
        assert isinstance(ours[7], rx.ResponseError) and not isinstance(ours[7], rx.NoScriptError)

    try:
        _run(run)
    finally:
        sync.close()


def _comparable(reply: Any) -> Any:
    if isinstance(reply, Exception):
        return (type(reply), str(reply))
    if isinstance(reply, list):
        return [_comparable(r) for r in reply]
    return reply


def test_one_connection_serves_round_trips_in_turn_and_closes_on_aclose(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url, decode_responses=True)

    async def run() -> None:
        wired = _wired(redis_url)
        before = _clients(sync)
        ids = {(await execute_commands(wired, [("CLIENT", "ID")], ()))[0] for _ in range(20)}
        assert len(ids) == 1  # reused, not one per round trip
        replies = await asyncio.gather(*(execute_commands(wired, [("INCR", "n"), ("GET", "n")], ()) for _ in range(8)))
        assert sorted(r[0] for r in replies) == list(range(1, 9))  # each its own replies, in its own order
        assert all(str(incr) == got for incr, got in replies)
        assert 1 < _clients(sync) - before <= 8  # at most one per round trip in flight
        await wired.aclose()
        await asyncio.sleep(0.05)
        assert _clients(sync) == before
        with pytest.raises(rx.ConnectionError):
            await execute_commands(wired, [("PING",)], ())

    try:
        _run(run)
    finally:
        sync.close()


def test_a_restart_is_503_then_a_fresh_connection(redis_factory: Callable[..., Any]) -> None:
    server = redis_factory()

    async def poll(wired: WiredRedis) -> Any:
        with redis_unavailable:
            return (await execute_commands(wired, [("PING",)], ()))[0]

    async def run() -> None:
        wired = _wired(server.url)
        try:
            assert await poll(wired) == "PONG"
            server.kill()
            await asyncio.sleep(0.05)  # the loop sees the connection closed while idle
            with pytest.raises(BackendUnavailable):
                await poll(wired)  # refused
            server.start()
            assert await poll(wired) == "PONG"
            server.kill()  # this time the connection is in the pool, unseen closed, when the call comes
            server.start()
            results = [await asyncio.gather(poll(wired), return_exceptions=True) for _ in range(2)]
            assert list(results[-1]) == ["PONG"]  # at most the stale one failed, as redis-py's would
        finally:
            await wired.aclose()

    _run(run)


def test_no_answer_within_the_socket_timeout_is_a_timeout_and_the_connection_is_dropped(redis_url: str) -> None:
    async def run() -> None:
        wired = _wired(redis_url, socket_timeout_s=1.1)
        try:
            first = (await execute_commands(wired, [("CLIENT", "ID")], ()))[0]
            with pytest.raises(BackendUnavailable) as down, redis_unavailable:
                await execute_commands(wired, [("BLPOP", "never", 3)], ())  # the server answers in 3 s
            assert isinstance(down.value.__cause__, rx.TimeoutError)
            assert (await execute_commands(wired, [("CLIENT", "ID")], ()))[0] != first  # a new connection
        finally:
            await wired.aclose()

    _run(run)


def test_a_cancelled_round_trip_leaves_no_reply_behind(redis_url: str) -> None:
    async def run() -> None:
        wired = _wired(redis_url)
        try:
            blocked = asyncio.ensure_future(execute_commands(wired, [("BLPOP", "never", 1)], ()))
            await asyncio.sleep(0.05)
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            assert await execute_commands(wired, [("ECHO", "next")], ()) == ["next"]
        finally:
            await wired.aclose()

    _run(run)


def test_password_and_database_as_redis_py_sets_them(redis_factory: Callable[..., Any]) -> None:
    server = redis_factory()
    redis.Redis(port=server.port).config_set("requirepass", "s3cret")
    url = f"redis://:s3cret@127.0.0.1:{server.port}/3"
    sync = redis.Redis.from_url(url, decode_responses=True)

    async def run() -> None:
        wired = _wired(url)
        wrong = _wired(f"redis://:nope@127.0.0.1:{server.port}/3")
        try:
            await execute_commands(wired, [("SET", "where", "db3")], ())
            assert sync.get("where") == "db3"
            with pytest.raises(BackendUnavailable) as refused, redis_unavailable:
                await execute_commands(wrong, [("PING",)], ())
            assert isinstance(refused.value.__cause__, rx.AuthenticationError)
        finally:
            await wired.aclose()
            await wrong.aclose()

    try:
        _run(run)
    finally:
        sync.config_set("requirepass", "")
        sync.close()


def test_tls_sentinel_and_cluster_keep_redis_pys_connections() -> None:
    tls = async_redis_client(QueueSettings(backend="redis", redis_url="rediss://127.0.0.1:1/0", redis_wire=True))
    assert isinstance(tls, aioredis.Redis) and not isinstance(tls, WiredRedis)
    plain = async_redis_client(QueueSettings(backend="redis", redis_url="redis://127.0.0.1:1/0"))
    assert isinstance(plain, aioredis.Redis) and not isinstance(plain, WiredRedis)  # redis_wire is off by default
    assert (
        async_redis_client(QueueSettings(backend="redis", redis_mode="sentinel", sentinel_addresses=["127.0.0.1:1"]))
        is None
    )

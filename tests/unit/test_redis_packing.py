"""The API's asyncio Redis connections pack commands with hiredis (``redis_async._HiredisPacking``):
the bytes must be the ones redis-py's own asyncio packer writes, for every kind of argument. The
worker's round trips (``redis_round_trip``) call hiredis straight for the queue's own commands: the
bytes redis-py's sync connection writes. A stream entry's payload is what ``EntryPayload`` writes."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import DataError

from foundation.queue import keys
from foundation.queue.config import QueueSettings
from foundation.queue.redis.async_queue import _Connection, async_redis_client
from foundation.queue.redis.entries import EntryPayload, encode_payload
from foundation.queue.redis.round_trip import _packed

COMMANDS: list[tuple[Any, ...]] = [
    ("GET", "a"),
    ("EVALSHA", "ab12", 4, "gw:{m}:job:x", 1764150000.123456, 1.5, -3, 0, 2**70, -0.0, 1e20, 1e-07),
    ("HSET", "k", "é 漢字 emoji 🦊", b"\xff\x00raw", "a\udcffb"),  # a lone surrogate: redis-py's 'replace'
    ("SCRIPT LOAD", "return 1"),  # redis-py splits a first argument with a space
    (b"CLIENT SETNAME", b"x"),
    ("SET", "k", memoryview(b"view")),
    ("SET", "k", ""),
]


@pytest.mark.parametrize("errors", ["strict", "replace"])
def test_hiredis_packing_writes_redis_pys_bytes(errors: str) -> None:
    ours = _Connection(decode_responses=True, encoding_errors=errors)
    theirs = aioredis.Connection(decode_responses=True, encoding_errors=errors)
    for command in COMMANDS:
        if errors == "strict" and any(isinstance(a, str) and "\udcff" in a for a in command):
            with pytest.raises(UnicodeEncodeError):
                theirs.pack_command(*command)
            with pytest.raises(UnicodeEncodeError):
                ours.pack_command(*command)
            continue
        assert b"".join(ours.pack_command(*command)) == b"".join(theirs.pack_command(*command)), command
    plain = [c for c in COMMANDS if not any(isinstance(a, str) and "\udcff" in a for a in c)]
    assert b"".join(ours.pack_commands(plain)) == b"".join(theirs.pack_commands(plain))
    with pytest.raises(DataError):  # refused alike
        ours.pack_command("SET", "k", True)


def test_the_queue_client_packs_with_hiredis() -> None:
    client = async_redis_client(QueueSettings(backend="redis", redis_url="redis://127.0.0.1:1/0"))
    assert client is not None and client.connection_pool.connection_class is _Connection


# What the worker's round trips carry: a claim with its wait, a create with its index writes, a wait.
QUEUE_COMMANDS: list[tuple[Any, ...]] = [
    ("XREAD", "COUNT", 1, "BLOCK", 250, "STREAMS", "gw:{m:a}:jobs", "1764150000123-0"),
    ("EVALSHA", "ab12" * 10, 2, "gw:{m:a}:jobs", "gw:{m:a}:claims", "gw-queue", "w1", "30000", "é 漢字"),
    ("SET", "gw:jobmodel:gen_1", "a"),
    ("ZADD", "gw:project:{p}:jobs", 1764150000123.456, "gen_1"),
    ("SADD", "gw:models", "a"),
    ("WAITAOF", 1, 0, 500),
    ("SET", "k", ""),
]


def test_round_trips_pack_the_bytes_redis_pys_sync_connection_writes() -> None:
    conn = redis.Connection()
    assert b"".join(conn.pack_commands(QUEUE_COMMANDS)) == b"".join(_packed(conn, QUEUE_COMMANDS))
    python = redis.Connection(command_packer=redis.connection.PythonRespSerializer(6000, conn.encoder.encode))
    assert b"".join(python.pack_commands(QUEUE_COMMANDS)) == b"".join(_packed(python, QUEUE_COMMANDS))


@pytest.mark.parametrize("job_id", ["gen_0f3a", "a", "A-z_0.9:/@+=-" * 15, "x" * 200])
def test_an_entry_payload_is_entrypayloads_own_json(job_id: str) -> None:
    assert keys.job_model_index(job_id)  # an id the queue's keys allow
    for model in ("wan-2.5", "ltx-2:fast/@+=", "m" * 200):
        written = encode_payload(job_id, model)
        assert written == EntryPayload(job_id=job_id, model=model).model_dump_json()
        assert EntryPayload.model_validate_json(written) == EntryPayload(job_id=job_id, model=model)

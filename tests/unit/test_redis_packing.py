"""The API's asyncio Redis connections pack commands with hiredis (``redis_async._HiredisPacking``):
the bytes must be the ones redis-py's own asyncio packer writes, for every kind of argument."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import DataError

from worker.queue.config import QueueSettings
from worker.queue.redis_async import _Connection, async_redis_client

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

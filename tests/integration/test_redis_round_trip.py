"""``redis_round_trip.round_trip`` on a real redis-server: what the worker's claims and commits keep of
redis-py's pipeline when they leave it (raw replies in order, an error reply raised only once every
reply is read, a dropped connection re-opened by the client's retry policy)."""

from __future__ import annotations

import pytest
import redis
import redis.exceptions as rx

from scripts.bench_queue import CountingRedis
from worker.queue.redis_round_trip import lean, round_trip


def test_replies_come_raw_and_in_order_in_one_write(redis_url: str) -> None:
    client = CountingRedis.from_url(redis_url, decode_responses=True)
    assert isinstance(client, CountingRedis)
    client.ping()
    entry = client.xadd("s", {"payload": "p"})
    client.sent = 0
    replies = round_trip(client, [("SET", "k", "v"), ("XREAD", "COUNT", 1, "STREAMS", "s", "0"), ("GET", "k")])
    assert client.sent == 1
    # XREAD's reply as the server sent it (a RESP3 map): no response callback reshaped it.
    assert replies == ["OK", {"s": [[entry, ["payload", "p"]]]}, "v"]
    client.close()


def test_an_error_reply_is_raised_after_every_reply_is_read(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with pytest.raises(rx.NoScriptError):
        round_trip(client, [("EVALSHA", "0" * 40, 0), ("SET", "after", "1")])
    assert client.get("after") == "1"  # the command behind the error ran, as in a pipeline
    # The pooled connection holds no stale reply: the next round trip reads its own.
    assert round_trip(client, [("GET", "after"), ("PING",)]) == ["1", "PONG"]
    client.close()


def test_a_dropped_connection_is_opened_again_by_the_retry_policy(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    (first,) = round_trip(client, [("CLIENT", "ID")])
    admin = redis.Redis.from_url(redis_url)
    assert admin.client_kill_filter(_id=str(first)) == 1  # as a restart or a proxy would drop it
    (second,) = round_trip(client, [("CLIENT", "ID")])
    assert int(second) != int(first)
    admin.close()
    client.close()


def test_only_a_pooled_single_server_client_goes_this_way(redis_url: str) -> None:
    pooled = redis.Redis.from_url(redis_url)
    single = redis.Redis.from_url(redis_url, single_connection_client=True)
    assert lean(pooled) and not lean(single) and not lean(object())
    pooled.close()
    single.close()

"""``redis_round_trip.RoundTrips`` on a real redis-server: what the worker's claims and commits keep of
redis-py's pipeline when they leave it (raw replies in order, an error reply raised only once every
reply is read, a dropped connection re-opened by the client's retry policy), and the connection it
holds for them (one, reused; another thread at the same moment gets one from the pool)."""

from __future__ import annotations

import threading

import pytest
import redis
import redis.exceptions as rx

from foundation.queue.redis.round_trip import RoundTrips, lean
from scripts.bench_queue import CountingRedis


def test_replies_come_raw_and_in_order_in_one_write(redis_url: str) -> None:
    client = CountingRedis.from_url(redis_url, decode_responses=True)
    assert isinstance(client, CountingRedis)
    trips = RoundTrips(client)
    trips.send([("PING",)])  # connects (HELLO) first
    entry = client.xadd("s", {"payload": "p"})
    client.sent = 0
    replies = trips.send([("SET", "k", "v"), ("XREAD", "COUNT", 1, "STREAMS", "s", "0"), ("GET", "k")])
    assert client.sent == 1
    # XREAD's reply as the server sent it (a RESP3 map): no response callback reshaped it.
    assert replies == ["OK", {"s": [[entry, ["payload", "p"]]]}, "v"]
    client.close()


def test_an_error_reply_is_raised_after_every_reply_is_read(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    trips = RoundTrips(client)
    with pytest.raises(rx.NoScriptError):
        trips.send([("EVALSHA", "0" * 40, 0), ("SET", "after", "1")])
    assert client.get("after") == "1"  # the command behind the error ran, as in a pipeline
    # The held connection holds no stale reply: the next round trip reads its own.
    assert trips.send([("GET", "after"), ("PING",)]) == ["1", "PONG"]
    client.close()


def test_one_connection_is_held_and_a_dropped_one_opens_again(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    trips = RoundTrips(client)
    (first,) = trips.send([("CLIENT", "ID")])
    assert trips.send([("CLIENT", "ID")]) == [first]  # the same connection, not a checkout each time
    admin = redis.Redis.from_url(redis_url)
    assert admin.client_kill_filter(_id=str(first)) == 1  # as a restart or a proxy would drop it
    (second,) = trips.send([("CLIENT", "ID")])  # the retry policy opens it again
    assert int(second) != int(first)
    assert trips.send([("CLIENT", "ID")]) == [second]
    admin.close()
    client.close()


def test_a_thread_that_finds_the_held_connection_busy_takes_one_from_the_pool(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    trips = RoundTrips(client)
    (held,) = trips.send([("CLIENT", "ID")])
    blocking = threading.Thread(target=trips.send, args=([("BLPOP", "never", 1)],))
    blocking.start()  # holds the held connection for a second
    seen: list[int] = []
    while blocking.is_alive() and not seen:
        (other,) = trips.send([("CLIENT", "ID")])
        if int(other) != int(held):
            seen.append(int(other))
    blocking.join()
    assert seen, "a round trip while the held connection was busy should have used another"
    assert trips.send([("CLIENT", "ID")]) == [held]  # and the held one is used again afterwards
    client.close()


def test_only_a_pooled_single_server_client_goes_this_way(redis_url: str) -> None:
    pooled = redis.Redis.from_url(redis_url)
    single = redis.Redis.from_url(redis_url, single_connection_client=True)
    assert lean(pooled) and not lean(single) and not lean(object())
    pooled.close()
    single.close()

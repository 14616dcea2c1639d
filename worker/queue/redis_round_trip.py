"""One round trip of raw commands over a redis-py connection (``round_trip``): the worker's per-job
calls, a claim (with its wait) and a commit (with a create's index writes), without redis-py's pipeline.

The pipeline costs Python of its own on every round trip: a stack of command objects, a response
callback per command (``XREAD``'s turns the woken entry into nested lists the claim never reads), the
``HIMPORT`` bookkeeping and the observability hooks of redis-py 8. On an idle worker that Python runs
cold, right after the wake-up: from the claim's reply arriving to ``Scripts.claim`` returning took
139 µs through the pipeline and 84 µs here (medians, this 2-core VM, ``scripts/bench_worker.py``).

What the pipeline did for these calls is kept: the client's pool and its connections (packing, decoding,
the health check, the connect-time ``HELLO``/``AUTH``/``SELECT``); the retry policy (a connection error
drops the connection and, as far as the policy allows, sends the commands again; only calls that are
safe to send twice come here, as with the pipeline); every reply read before an error reply is raised
(the pipeline's ``raise_on_error``), so the pooled connection never holds a stale reply.

Only a plain ``redis.Redis`` (one server, or Sentinel's master) with a pool goes this way (``lean``); a
Cluster client keeps redis-py's pipeline, which routes each command to its slot's node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

__all__ = ["lean", "round_trip"]


def lean(client: Any) -> bool:
    """Whether ``round_trip`` can carry ``client``'s commands (a pooled single-server client)."""
    return isinstance(client, redis.Redis) and client.connection is None


def round_trip(client: redis.Redis, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """The raw replies of ``commands``, sent in one write on one of ``client``'s pooled connections;
    the first error reply is raised once all are read."""
    pool = client.connection_pool
    conn: Any = pool.get_connection()  # redis-py leaves its connection methods untyped
    try:
        replies: list[Any] = conn.retry.call_with_retry(lambda: _send(conn, commands), lambda _error: conn.disconnect())
        if conn.should_reconnect():  # a maintenance notice from the server (redis-py's own check)
            conn.disconnect()
    except BaseException:
        conn.disconnect()  # a reply may be unread: the connection goes back to the pool closed
        raise
    finally:
        pool.release(conn)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


def _send(conn: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    conn.send_packed_command(conn.pack_commands(commands))
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(conn.read_response())
        except ResponseError as e:  # an error reply: the rest are read all the same
            replies.append(e)
    return replies

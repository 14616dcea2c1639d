"""One round trip of raw commands over a redis-py connection (``RoundTrips.send``): the worker's per-job
calls, a claim (with its wait) and a commit (with a create's index writes), without redis-py's pipeline.

The pipeline costs Python of its own on every round trip: a stack of command objects, a response
callback per command (``XREAD``'s turns the woken entry into nested lists the claim never reads), the
bookkeeping and the observability hooks of redis-py 8. On an idle worker that Python runs cold, right
after the wake-up. The pool's checkout costs too (a lock, a readiness poll of the socket, observability
calls and an event per checkout and release), so one connection stays checked out for these round
trips; a thread that finds it in use takes one from the pool as before. What it buys, against the
pipeline in the same run: docs/benchmarks.md, "Micro-optimizations, A/B (issue 37)".

What the pipeline did for these calls is kept, through the connection's public methods: the client's
pool and its connections (packing, decoding, the health check, the connect-time ``HELLO``/``AUTH``/
``SELECT``); the retry policy (a connection error drops the connection and, as far as the policy
allows, sends the commands again; only calls that are safe to send twice come here, as with the
pipeline); every reply read before an error reply is raised (the pipeline's ``raise_on_error``), so a
connection never holds a stale reply: any other failure drops the connection (the next send opens it
again), which is what the pool's readiness poll guards.

Only a plain ``redis.Redis`` (one server, or Sentinel's master) with a pool goes this way (``lean``); a
Cluster client keeps redis-py's pipeline, which routes each command to its slot's node.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["RoundTrips", "lean"]


def lean(client: Any) -> bool:
    """Whether ``RoundTrips`` can carry ``client``'s commands (a pooled single-server client)."""
    return isinstance(client, redis.Redis) and client.connection is None


class RoundTrips:
    """Round trips of raw commands on ``client``'s connections: one held for them (checked out of the
    pool once, and again after a fork), or, while another thread is using it, one from the pool."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool: Any = client.connection_pool  # redis-py leaves its pool's methods untyped
        self._lock = threading.Lock()
        self._held: Any = None  # redis-py leaves its connection methods untyped
        self._pid = os.getpid()

    def send(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The raw replies of ``commands``, sent in one write; the first error reply is raised once all
        are read."""
        if not self._lock.acquire(blocking=False):
            conn = self._pool.get_connection()
            try:
                return _round_trip(conn, commands)
            finally:
                self._pool.release(conn)
        try:
            if self._held is None or self._pid != os.getpid():  # a forked child: the pool starts afresh
                self._pid = os.getpid()
                self._held = self._pool.get_connection()
                # Closed when this object goes, before the garbage collector finalizes its socket on
                # its own (a queue dropped unclosed: an "unclosed socket" warning otherwise).
                weakref.finalize(self, self._held.disconnect)
            else:
                self._ready(self._held)
            return _round_trip(self._held, commands)
        finally:
            self._lock.release()

    def _ready(self, conn: Any) -> None:
        """The pool's check at checkout, kept for the held connection: one with something to read while no
        reply is awaited (the server closed it, a restart) is opened again before the commands go out."""
        try:
            if conn.can_read() and not self._pool.maint_notifications_enabled():
                raise ConnectionError("Connection has data")
        except (OSError, RedisConnectionError, RedisTimeoutError):  # OSError: the builtin ConnectionError too
            conn.disconnect()
            conn.connect()


def _round_trip(conn: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    try:
        replies: list[Any] = conn.retry.call_with_retry(lambda: _send(conn, commands), lambda _error: conn.disconnect())
        if conn.should_reconnect():  # a maintenance notice from the server (redis-py's own check)
            conn.disconnect()
    except BaseException:
        conn.disconnect()  # a reply may be unread: closed, the connection opens again on its next send
        raise
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

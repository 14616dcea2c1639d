"""A lean asyncio connection pool to one Redis server, for the API's hot round trips (``RedisWire``).

A poll and a create on Redis are each one round trip of raw commands (``async_queue.execute_commands``).
Over redis-py's asyncio connection that round trip pays a pool checkout, a stream write, a timeout
context and a parser call per reply, a large share of a poll's whole cost in the API process. Here a
connection is an ``asyncio.Protocol`` feeding ``hiredis.Reader``: the commands go out in one write, the
replies are parsed in C as the bytes arrive, and the waiting request is woken once, when the last reply
is in; one timer bounds the whole round trip. It is optional, off by default (``queue.redis_wire``):
redis-py's connection is the reference tests/integration/test_redis_wire.py compares it with; what it
buys: docs/benchmarks.md, "Micro-optimizations off by default (issue 48)".

It keeps what the redis-py connection did for this path, with redis-py's public pieces only:

- the bytes: commands packed by hiredis (``hiredis.pack_command``), or by the connection's own
  ``pack_command`` where hiredis does not take them (``packer``);
- the replies: decoded with the client's encoding and error handler; an error reply is the exception
  redis-py makes of it (``NoScriptError``, ``ReadOnlyError``, ...: ``_error``'s table) in its place
  among the replies, and one that means the connection is unusable (``BusyLoadingError``, a
  ``ConnectionError``) is raised;
- the connection set-up: ``HELLO 3`` (RESP3, as redis-py speaks it) with the credentials, ``CLIENT
  SETNAME``, ``SELECT``;
- the failures: no connection within ``connect_timeout_s`` or no complete answer within
  ``socket_timeout_s`` is redis-py's ``ConnectionError`` / ``TimeoutError``, and the connection is
  dropped; a connection the server closed while idle (a restart) is dropped at checkout and a fresh
  one opened; the client's retry policy (``retry``) decides whether a failed round trip is sent again;
- at most ``max_connections`` open ("Too many connections" past it, as redis-py's pool).

Only plain TCP: ``async_queue.async_redis_client`` keeps redis-py's connection for TLS.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import hiredis
import redis.exceptions as rx

__all__ = ["Packer", "RedisWire", "WireSettings"]

_CLOSED = "Connection closed by server."  # redis-py's words for it
_MORE = object()  # hiredis: no complete reply in the buffer yet


class Packer(Protocol):
    """What packs a command hiredis will not (a redis-py asyncio connection: ``pack_command``)."""

    def pack_command(self, *args: Any) -> list[bytes]: ...


class Retry(Protocol):
    """redis-py's retry policy (``redis.asyncio.retry.Retry``), as the client's connections carry it."""

    async def call_with_retry(self, do: Any, fail: Any) -> Any: ...

    def get_retries(self) -> int: ...


@dataclass(frozen=True)
class WireSettings:
    """Where and how to connect: the client's own connection settings."""

    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = None
    client_name: str | None = None
    socket_timeout_s: float | None = None
    connect_timeout_s: float | None = None
    encoding: str = "utf-8"
    encoding_errors: str = "strict"
    max_connections: int = 2**31
    protocol: int = 3  # RESP version, as the client's connections speak it

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


# Error replies by their first word, as the exceptions redis-py raises for them on one server (its
# parser's table, less the Cluster redirections); any other error reply is a ``ResponseError``.
_ERRORS: dict[str, type[rx.RedisError]] = {
    "NOSCRIPT": rx.NoScriptError,
    "READONLY": rx.ReadOnlyError,
    "LOADING": rx.BusyLoadingError,
    "MASTERDOWN": rx.MasterDownError,
    "OOM": rx.OutOfMemoryError,
    "EXECABORT": rx.ExecAbortError,
    "NOPERM": rx.NoPermissionError,
    "NOAUTH": rx.AuthenticationError,
    "WRONGPASS": rx.AuthenticationError,
    "TRYAGAIN": rx.TryAgainError,
}
# ``ERR`` replies that redis-py raises as more than a ``ResponseError``.
_ERR_MESSAGES: dict[str, type[rx.RedisError]] = {
    "max number of clients reached": rx.ConnectionError,
    "invalid password": rx.AuthenticationError,
    "Client sent AUTH, but no password is set": rx.AuthenticationError,
}


def _error(message: str) -> Exception:
    """An error reply as redis-py makes it (``NOSCRIPT ...`` → ``NoScriptError``, ...), from the public
    exception classes of ``redis.exceptions``; tests/integration/test_redis_wire.py compares the two."""
    code, _, rest = message.partition(" ")
    kind = _ERRORS.get(code) or (_ERR_MESSAGES.get(rest) if code == "ERR" else None)
    if kind is None:
        return rx.ResponseError(message)
    return kind(rest, status_code=code)


class _Link(asyncio.Protocol):
    """One connection: at most one round trip in flight, its replies collected as they are parsed."""

    def __init__(self, settings: WireSettings) -> None:
        self._settings = settings
        self._reader = hiredis.Reader(
            protocolError=rx.InvalidResponse,
            replyError=_error,
            notEnoughData=_MORE,
            encoding=settings.encoding,
            errors=settings.encoding_errors,
        )
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[list[Any]] | None = None
        self._replies: list[Any] = []
        self._expected = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        error = rx.ConnectionError(f"Error while reading from {self._settings.address} : {exc}" if exc else _CLOSED)
        self._fail(error)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        try:
            reader.feed(data)
            while (reply := reader.gets()) is not _MORE:
                self._replies.append(reply)
                if len(self._replies) == self._expected:
                    waiter, self._waiter = self._waiter, None
                    if waiter is not None and not waiter.done():
                        waiter.set_result(self._replies)
        except rx.InvalidResponse as e:
            self.close()
            self._fail(e)

    def round_trip(self, packed: bytes, count: int) -> asyncio.Future[list[Any]]:
        """Send ``packed`` (``count`` commands); the future of their ``count`` replies."""
        assert self._transport is not None and self._waiter is None
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self._replies = []
        self._expected = count
        self._transport.write(packed)
        return waiter

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def timed_out(self) -> None:
        self.close()
        self._fail(rx.TimeoutError(f"Timeout reading from {self._settings.address}"))

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


class RedisWire:
    """A pool of ``_Link`` connections to one server; ``round_trip`` sends commands and reads replies."""

    def __init__(self, settings: WireSettings, *, packer: Packer, retry: Retry) -> None:
        self.settings = settings
        self._packer = packer
        self._retry = retry
        self._idle: list[_Link] = []
        self._open = 0
        self._closed = False

    def round_trip(self, commands: Sequence[Sequence[Any]]) -> Awaitable[list[Any]]:
        """Send ``commands`` at once on one connection; awaited, their replies, an error reply as a value
        (a ``ResponseError``); the connection's failures are raised (see the module's list)."""
        once = functools.partial(self._once, self._pack(commands), len(commands))
        if self._retry.get_retries() == 0:  # no second try: no wrapper to await through
            return once()
        return self._retry.call_with_retry(once, self._failed)

    async def _failed(self, error: Exception) -> None:
        return None  # the link that failed is closed already

    def _pack(self, commands: Sequence[Sequence[Any]]) -> bytes:
        chunks: list[bytes] = []
        for command in commands:
            first = command[0]
            if isinstance(first, str) and " " not in first and isinstance(command, tuple):
                try:
                    chunks.append(hiredis.pack_command(command))
                    continue
                except (TypeError, UnicodeEncodeError):
                    pass
            chunks.extend(self._packer.pack_command(*command))
        return b"".join(chunks)

    async def _once(self, packed: bytes, count: int) -> list[Any]:
        idle = self._idle
        link = idle.pop() if idle else None  # the common case, without a coroutine for it
        if link is None or link.closed:
            if link is not None:
                self._open -= 1  # closed by the server while idle: dropped
            link = await self._checkout()
        timer = None
        timeout_s = self.settings.socket_timeout_s
        try:
            replies = link.round_trip(packed, count)
            if timeout_s is not None:
                timer = asyncio.get_running_loop().call_later(timeout_s, link.timed_out)
            result = await replies
            for reply in result:  # as redis-py: these mean the connection cannot serve
                if isinstance(reply, (rx.ConnectionError, list)):
                    first = reply[0] if isinstance(reply, list) and reply else reply
                    if isinstance(first, rx.ConnectionError):
                        raise first
        except BaseException:
            self._discard(link)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        self._release(link)
        return result

    async def _checkout(self) -> _Link:
        if self._closed:
            raise rx.ConnectionError("the Redis connection pool is closed")
        while self._idle:
            link = self._idle.pop()
            if not link.closed:
                return link
            self._open -= 1  # closed by the server while idle: dropped
        if self._open >= self.settings.max_connections:
            raise rx.ConnectionError("Too many connections")
        self._open += 1
        try:
            return await self._connect()
        except BaseException:
            self._open -= 1
            raise

    def _release(self, link: _Link) -> None:
        if self._closed or link.closed:
            self._discard(link)
        else:
            self._idle.append(link)

    def _discard(self, link: _Link) -> None:
        link.close()
        self._open -= 1

    async def _connect(self) -> _Link:
        s = self.settings
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(s.connect_timeout_s):
                _, link = await loop.create_connection(lambda: _Link(s), s.host, s.port)
        except TimeoutError:
            raise rx.TimeoutError(f"Timeout connecting to server {s.address}") from None
        except OSError as e:
            raise rx.ConnectionError(f"Error {e.errno} connecting to {s.address}. {e.strerror or e}.") from e
        try:
            await self._handshake(link)
        except BaseException:
            link.close()
            raise
        return link

    async def _handshake(self, link: _Link) -> None:
        """As redis-py's ``on_connect``: ``HELLO 3`` with the credentials (RESP3, redis-py's default, so
        every reply has the shape it has there; ``AUTH`` on RESP2), ``CLIENT SETNAME``, ``SELECT``; in
        one round trip."""
        s = self.settings
        commands: list[tuple[Any, ...]] = []
        if s.protocol == 3:
            credentials = ("AUTH", s.username or "default", s.password) if s.password else ()
            commands.append(("HELLO", 3, *credentials))
        elif s.password:
            commands.append(("AUTH", s.username, s.password) if s.username else ("AUTH", s.password))
        if s.client_name:
            commands.append(("CLIENT", "SETNAME", s.client_name))
        if s.db:
            commands.append(("SELECT", s.db))
        if not commands:
            return
        replies = link.round_trip(b"".join(hiredis.pack_command(c) for c in commands), len(commands))
        try:
            async with asyncio.timeout(s.socket_timeout_s):
                answered = await replies
        except TimeoutError:
            raise rx.TimeoutError(f"Timeout reading from {s.address}") from None
        for command, reply in zip(commands, answered, strict=True):
            if isinstance(reply, rx.AuthenticationError | rx.ConnectionError):
                raise reply
            if isinstance(reply, Exception):
                raise rx.ConnectionError(f"{command[0]} refused by {s.address}: {reply}")

    async def aclose(self) -> None:
        """Close every idle connection; one in use is closed when its round trip ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for link in idle:
            self._discard(link)

"""Request-size limit and per-key rate limits.

``BodyLimitMiddleware`` refuses an oversized body without holding it: a declared ``Content-Length``
above the limit is refused before the app runs, and a chunked body is counted as it streams. Before the
413 is sent, the rest of the body is read and dropped (up to a cap): a server that closes a socket
with unread request bytes makes the kernel send a reset, which can destroy the 413 before the client
has read it (clients such as httpx send the whole body before they read the answer).

Rate limits are per API key, one rule on every backend (``rate_item``): at most ``burst`` requests in
any ``burst / rate_per_s`` seconds, a moving window (the ``limits`` library's on Redis). ``MemoryLimiter``
keeps it in the process (the embedded mode runs one API process) with the same decisions and figures,
in a deque per key: no expiry thread, no list that grows with the window; ``AsyncRedisLimiter`` shares it
across API replicas over an asyncio client (one Redis server), and raises ``BackendUnavailable`` when that
Redis cannot answer; ``RedisLimiter`` is the same window (same keys) for Sentinel and Cluster, whose
clients are sync: each hit runs on a thread of its own. All three are one ``RateLimiter``, async only. Every
decision carries the ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` figures (``RateDecision.headers``);
``RateLimitHeadersMiddleware`` puts them on every answer to a keyed request, not only on the 429.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter
from limits.util import WindowStats
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.error_handlers import error_response
from api.errors import BodyTooLarge
from foundation.core.errors import ErrorCode
from foundation.queue.redis.async_queue import execute_commands
from foundation.queue.unavailable import redis_unavailable

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aioredis

__all__ = [
    "AsyncRedisLimiter",
    "BodyLimitMiddleware",
    "MemoryLimiter",
    "RateDecision",
    "RateLimitHeadersMiddleware",
    "RateLimiter",
    "RedisLimiter",
    "note_decision",
    "rate_item",
    "rate_limit_headers",
    "track_decision",
]


# How much of a refused body is read and dropped so that the 413 reaches the client, and for how long:
# beyond either the connection is closed unread (a client sending that much gets a reset).
DRAIN_MAX_BYTES = 64 * 1024 * 1024
DRAIN_TIMEOUT_S = 5.0


class BodyLimitMiddleware:
    """A small ASGI middleware: 413 ``payload_too_large`` for bodies above ``max_bytes``, or above a route's own
    limit in ``routes`` (``(method, path)`` → bytes: an upload route carries an image besides its fields)."""

    def __init__(self, app: ASGIApp, max_bytes: int, routes: dict[tuple[str, str], int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.routes = routes or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.routes.get((scope["method"], scope["path"]), self.max_bytes)
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            # A client waiting for "100 Continue" has sent no body: answer without reading (reading
            # would make the server send the 100 and invite the upload).
            expects_continue = headers.get(b"expect", b"").lower() == b"100-continue"
            drain = not expects_continue and int(declared) <= DRAIN_MAX_BYTES
            await self._refuse(scope, receive, send, drain_from=0 if drain else None)
            return
        seen = 0
        more_body = True
        started = False

        async def counting_receive() -> Message:
            nonlocal seen, more_body
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                more_body = bool(message.get("more_body", False))
                if seen > limit:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if started:  # pragma: no cover - routes read the body before answering
                raise
            # Once the last body message is read, a further receive() would wait for the disconnect.
            await self._refuse(scope, receive, send, drain_from=seen if more_body else None)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, *, drain_from: int | None) -> None:
        """Answer 413; first read and drop the rest of the body (``drain_from`` bytes were read already),
        unless ``drain_from`` is None."""
        if drain_from is not None:
            await _drain(receive, drain_from)
        response = error_response(
            413,
            ErrorCode.payload_too_large,
            f"request body exceeds {self.max_bytes} bytes",
            None,
            {"Connection": "close"},  # the unread rest of the body must not be parsed as a next request
        )
        await response(scope, receive, send)


async def _drain(receive: Receive, seen: int) -> None:
    """Read and drop request body messages until the body ends, or the byte or time cap is reached."""
    deadline = asyncio.get_running_loop().time() + DRAIN_TIMEOUT_S
    while seen <= DRAIN_MAX_BYTES:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), timeout=remaining)
        except TimeoutError:
            return
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        seen += len(message.get("body", b""))


@dataclass(frozen=True)
class RateDecision:
    """One request's verdict, with what the ``RateLimit-*`` headers report: ``limit`` requests per
    window, ``remaining`` of them after this one, and the window's next slot in ``reset_s`` seconds."""

    allowed: bool
    retry_after_s: int = 0
    limit: int = 0
    remaining: int = 0
    reset_s: int = 0

    def headers(self) -> dict[str, str]:
        """``RateLimit-Limit``, ``RateLimit-Remaining``, ``RateLimit-Reset`` (and ``Retry-After`` when
        refused), for every answer to a keyed request."""
        headers = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_s),
        }
        if not self.allowed:
            headers["Retry-After"] = str(self.retry_after_s)
        return headers


class _Noted:
    """The decision taken for the request being served. A mutable box, not the ContextVar's value itself:
    a sync route runs in a worker thread on a copy of the context, where a ``set`` would not come back."""

    decision: RateDecision | None = None


_noted: ContextVar[_Noted | None] = ContextVar("genworker_rate_decision", default=None)


def note_decision(decision: RateDecision) -> None:
    """Record this request's rate decision for ``RateLimitHeadersMiddleware`` (a no-op outside it)."""
    box = _noted.get()
    if box is not None:
        box.decision = decision


class track_decision:  # noqa: N801 - used as a function: ``with track_decision() as box``
    """Collect the rate decision taken for the request served inside (``note_decision``)."""

    __slots__ = ("_token",)

    def __enter__(self) -> _Noted:
        box = _Noted()
        self._token = _noted.set(box)
        return box

    def __exit__(self, *exc_info: object) -> None:
        _noted.reset(self._token)


def rate_limit_headers(decision: RateDecision | None, present: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``decision.headers()`` as raw ASGI headers, less those an answer with the raw headers ``present``
    has already (a 429 carries its own); none when no decision was taken."""
    if decision is None:
        return []
    names = {name.lower() for name, _ in present}
    raw = [(name.lower().encode("ascii"), value.encode("ascii")) for name, value in decision.headers().items()]
    return [(name, value) for name, value in raw if name not in names]


class RateLimitHeadersMiddleware:
    """Adds the ``RateLimit-*`` headers of the request's rate decision to its answer, whatever the status
    (a keyed 200, 202, 404 or 409 tells the client its budget as well as a 429 does). Requests that
    presented no valid key took no decision and get none."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with track_decision() as box:

            async def send_with_headers(message: Message) -> None:
                if message["type"] == "http.response.start" and box.decision is not None:
                    headers = message.get("headers", [])
                    message = {**message, "headers": [*headers, *rate_limit_headers(box.decision, headers)]}
                await send(message)

            await self.app(scope, receive, send_with_headers)


class RateLimiter(Protocol):
    """The per-key limit, awaited on the event loop: one hit per keyed request."""

    async def hit(self, key_id: str) -> RateDecision: ...

    async def aclose(self) -> None:
        """Release what the limiter holds (a client, threads)."""
        ...


# Prefix of the rate-limit keys in Redis. The ``limits`` library appends
# ``LIMITER/<key id>/<limit>/<window>/second``: one key (a list of hit times) per API key, a single key
# per call, so it is Cluster-safe.
RATE_KEY_PREFIX = "gw:ratelimit"


def rate_item(rate_per_s: float, burst: int) -> RateLimitItem:
    """The one limit of both backends: ``burst`` requests in any ``burst / rate_per_s`` seconds (a moving
    window, rounded up to whole seconds), so the sustained rate is ``rate_per_s`` and a quiet key may
    send ``burst`` at once."""
    return RateLimitItemPerSecond(burst, max(1, math.ceil(burst / rate_per_s)))


def _decision(allowed: bool, stats: WindowStats, item: RateLimitItem, now: float) -> RateDecision:
    # At most the window: Redis keeps hit times to 14 significant digits (Lua's tostring), so a hit
    # taken an instant ago may read as a hair after ``now``.
    reset_s = min(item.get_expiry(), max(0, math.ceil(stats.reset_time - now)))
    return RateDecision(
        allowed,
        retry_after_s=0 if allowed else max(1, reset_s),
        limit=item.amount,
        remaining=max(0, stats.remaining),
        reset_s=reset_s,
    )


# Keys the in-process limiter holds before it drops those with no hit left in their window.
_MEMORY_KEYS_MAX = 10_000


class MemoryLimiter:
    """The limit in this process (the embedded mode runs one API process): the moving window of the
    Redis limiters, decided alike (``acquire_moving_window.lua``, ``moving_window.lua``).

    Per key, the times of its newest ``burst`` hits, oldest first: a hit is refused while the oldest of
    them is still in the window (``>= now - window``), else it is recorded; the figures count the hits
    in the window (``> now - window``) and reset when the oldest of those leaves it. Times that left the
    window are dropped as hits come, so a key holds at most ``burst`` of them. Called on the event loop
    only, and a hit awaits nothing, so each hit is whole without a lock."""

    def __init__(self, rate_per_s: float, burst: int, *, clock: Callable[[], float] = time.time) -> None:
        self.item = rate_item(rate_per_s, burst)
        self._amount = self.item.amount
        self._window_s = float(self.item.get_expiry())
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}

    async def hit(self, key_id: str) -> RateDecision:
        now = self._clock()
        floor = now - self._window_s
        hits = self._hits.get(key_id)
        if hits is None:
            if len(self._hits) >= _MEMORY_KEYS_MAX:
                self._forget_idle(floor)
            hits = self._hits[key_id] = deque(maxlen=self._amount)
        while hits and hits[0] < floor:  # out of the window for good: neither blocks nor counts
            hits.popleft()
        allowed = not (len(hits) >= self._amount and hits[0] >= floor)
        if allowed:
            hits.append(now)
        in_window = len(hits)
        for at in hits:  # a hit exactly on the window's edge blocks but is no longer counted
            if at > floor:
                break
            in_window -= 1
        start = hits[len(hits) - in_window] if in_window else now
        stats = WindowStats(start + self._window_s, self._amount - in_window)
        return _decision(allowed, stats, self.item, now)

    async def aclose(self) -> None:
        """Nothing to release: the window lives in this object."""

    def _forget_idle(self, floor: float) -> None:
        idle = [key for key, hits in self._hits.items() if not hits or hits[-1] < floor]
        for key in idle:
            del self._hits[key]


# Threads of a ``RedisLimiter``: its hits wait on the network, as many at once.
_LIMITER_THREADS = 2


class RedisLimiter:
    """The limit shared by every API replica over a sync Redis client (Sentinel or Cluster, which have no
    asyncio client here; a single server too): each hit runs on a thread of this limiter's own."""

    def __init__(self, client: redis.Redis, rate_per_s: float, burst: int) -> None:
        self.item = rate_item(rate_per_s, burst)
        self._limiter = MovingWindowRateLimiter(_storage_over(client))
        self._executor = ThreadPoolExecutor(max_workers=_LIMITER_THREADS, thread_name_prefix="genworker-limit")

    async def hit(self, key_id: str) -> RateDecision:
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(self._hit, key_id))

    @redis_unavailable  # the counter's Redis down: BackendUnavailable, which the API answers 503
    def _hit(self, key_id: str) -> RateDecision:
        allowed = self._limiter.hit(self.item, key_id)
        return _decision(allowed, self._limiter.get_window_stats(self.item, key_id), self.item, time.time())

    async def aclose(self) -> None:
        """Stop this limiter's threads (the client stays its opener's)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


# API keys whose counter key name ``AsyncRedisLimiter`` keeps built (cleared when full).
_KEY_NAMES_MAX = 10_000


class AsyncRedisLimiter:
    """``RedisLimiter`` over a ``redis.asyncio`` client (single server): the same keys and window, awaited.
    It closes its client at ``aclose``."""

    def __init__(self, client: aioredis.Redis, rate_per_s: float, burst: int) -> None:
        from limits.aio.storage import RedisStorage as AsyncRedisStorage

        self.client = client
        self.item = rate_item(rate_per_s, burst)
        storage = AsyncRedisStorage(
            "async+redis://",
            implementation="redispy",
            key_prefix=RATE_KEY_PREFIX,
            connection_pool=client.connection_pool,  # type: ignore[arg-type]  # passed on to redis.asyncio.Redis
        )
        bridge: Any = storage.bridge  # its key names and registered scripts, for ``_commands``
        self._bridge = bridge
        self._window_s = self.item.get_expiry()
        self.scripts = (bridge.lua_acquire_moving_window.script, bridge.lua_moving_window.script)
        self._keys: dict[str, str] = {}  # API key id → its counter's Redis key

    async def hit(self, key_id: str) -> RateDecision:
        """``limits``' hit and window reading, in one round trip."""
        now = time.time()
        with redis_unavailable:
            replies = await execute_commands(self.client, self._commands(key_id, now), self.scripts)
        return self._decided(replies, now)

    def _commands(self, key_id: str, now: float) -> list[tuple[Any, ...]]:
        """One hit at ``now`` as raw commands (the scripts by SHA; their sources are ``scripts``)."""
        key = self._keys.get(key_id)
        if key is None:
            if len(self._keys) >= _KEY_NAMES_MAX:
                self._keys.clear()
            key = self._keys[key_id] = self._bridge.prefixed_key(self.item.key_for(key_id))
        amount, window_s = self.item.amount, self._window_s
        return [
            ("EVALSHA", self._bridge.lua_acquire_moving_window.sha, 1, key, now, amount, window_s, 1),
            ("EVALSHA", self._bridge.lua_moving_window.sha, 1, key, now - window_s, amount),
        ]

    def _decided(self, replies: Sequence[Any], now: float) -> RateDecision:
        """The decision from the replies to ``_commands(key_id, now)``."""
        acquired, window = replies
        start, count = (float(window[0]), int(window[1])) if window else (now, 0)
        stats = WindowStats(start + self._window_s, self.item.amount - count)
        return _decision(bool(acquired), stats, self.item, time.time())

    async def aclose(self) -> None:
        await self.client.aclose(close_connection_pool=True)


def _storage_over(client: redis.Redis) -> RedisStorage:
    """``limits``' Redis storage on our own client (its URL, Sentinel or Cluster set-up, timeouts), not
    a second connection it would open from a URL: the client is swapped in and the scripts registered
    on it. Nothing connects until the first hit."""
    storage = RedisStorage("redis://", key_prefix=RATE_KEY_PREFIX)
    storage.storage = client
    storage.initialize_storage("")
    return storage

"""Request-size limit and per-key rate limits.

``BodyLimitMiddleware`` refuses an oversized body without holding it: a declared ``Content-Length``
above the limit is refused before the app runs, and a chunked body is counted as it streams. Before the
413 is sent, the rest of the body is read and dropped (up to a cap): a server that closes a socket
with unread request bytes makes the kernel send a reset, which can destroy the 413 before the client
has read it (clients such as httpx send the whole body before they read the answer).

Rate limits are per API key. ``TokenBucketLimiter`` lives in the process (the embedded mode runs one
API process); ``RedisWindowLimiter`` shares one fixed-window counter per key across API replicas and
raises ``BackendUnavailable`` when that Redis cannot answer.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from worker.core.errors import ErrorCode, GenworkerError
from worker.queue.unavailable import redis_unavailable

if TYPE_CHECKING:
    import redis

__all__ = ["BodyLimitMiddleware", "RateDecision", "RateLimiter", "RedisWindowLimiter", "TokenBucketLimiter"]


# How much of a refused body is read and dropped so that the 413 reaches the client, and for how long:
# beyond either the connection is closed unread (a client sending that much gets a reset).
DRAIN_MAX_BYTES = 64 * 1024 * 1024
DRAIN_TIMEOUT_S = 5.0


class BodyTooLarge(GenworkerError):
    """A request body over the limit, found while streaming it (answered 413)."""


class BodyLimitMiddleware:
    """A small ASGI middleware: 413 ``payload_too_large`` for bodies above ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
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
                if seen > self.max_bytes:
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
    allowed: bool
    retry_after_s: int = 0


class RateLimiter(Protocol):
    def hit(self, key_id: str) -> RateDecision: ...


class TokenBucketLimiter:
    """In-process token bucket per key: ``burst`` requests at once, refilled at ``rate_per_s``."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, last refill monotonic)
        self._lock = threading.Lock()

    def hit(self, key_id: str) -> RateDecision:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate_per_s)
            if tokens >= 1.0:
                self._buckets[key_id] = (tokens - 1.0, now)
                return RateDecision(True)
            self._buckets[key_id] = (tokens, now)
            wait = (1.0 - tokens) / self.rate_per_s
            return RateDecision(False, max(1, math.ceil(wait)))


# Redis key of one key's counter for one window; a single key per call keeps it Cluster-safe.
RATE_KEY = "gw:ratelimit:{key_id}:{window}"


class RedisWindowLimiter:
    """A fixed window of ``burst`` requests per ``burst / rate_per_s`` seconds, shared by replicas."""

    def __init__(self, client: redis.Redis, rate_per_s: float, burst: int) -> None:
        self.client = client
        self.burst = burst
        self.window_s = max(1, math.ceil(burst / rate_per_s))

    @redis_unavailable  # the counter's Redis down: BackendUnavailable, which the API answers 503
    def hit(self, key_id: str) -> RateDecision:
        now = time.time()
        window = int(now // self.window_s)
        key = RATE_KEY.format(key_id=key_id, window=window)
        pipe = self.client.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, self.window_s + 1)
        count = int(pipe.execute()[0])
        if count <= self.burst:
            return RateDecision(True)
        return RateDecision(False, max(1, math.ceil((window + 1) * self.window_s - now)))

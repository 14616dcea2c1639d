"""Bearer-key authentication, scopes and per-key rate limits, with a short-lived key cache.

Two steps:

- ``bearer`` (async, no I/O, a route dependency; ``presented_key`` the same for a route that reads its
  request itself): a missing or malformed ``Authorization`` header is 401 before anything else is
  looked at;
- ``Authenticator.authorize`` (async, awaited first thing in a route's body, the one entry point): an
  unknown or revoked key is 401 (with ``WWW-Authenticate: Bearer``); then the key's rate limit (429 with
  ``Retry-After``); then the scope (403).

**The key cache.** An active key's record is kept for ``key_cache_ttl_s`` (default
``KEY_CACHE_TTL_S``, 1 s) after it was read from the key store, so a poll costs no key-store lookup.
The bound this gives: a revoked key is refused by every API process at most ``key_cache_ttl_s`` after
the revocation was written (a cached record was read before it, and is trusted no longer than that).
Unknown and revoked keys are never cached: they are looked up on every request, so a new key works at
once and a refusal is never stale. The cache holds SHA-256 hashes, never keys, and at most
``KEY_CACHE_MAX`` entries (it is emptied when full). Lookups that miss the cache read the key store
(SQLite or Redis, sync clients) on a small executor of the authenticator's own; the rate limiter is
awaited (``api/limits.py``).

A key acts for one project; a generation of another project is answered 404 by the routes, never 403,
so ids do not leak.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.api_keys import ApiKey, KeyStore, Scope, hash_key
from api.errors import ApiError
from api.limits import RateDecision, RateLimiter, note_decision
from foundation.core.errors import ErrorCode

__all__ = ["KEY_CACHE_MAX", "KEY_CACHE_TTL_S", "Authenticator", "KeyCache", "Principal", "bearer", "presented_key"]

# How long an active key's record is trusted after it was read: the revocation bound (module docstring).
KEY_CACHE_TTL_S = 1.0
KEY_CACHE_MAX = 10_000

# auto_error=False: FastAPI's own 403 for a missing header would bypass our 401 body.
_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearerAuth",
    description="A project API key: `Authorization: Bearer gw_...` (`genworker keys create`).",
)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's id, its project and scopes."""

    key_id: str
    project: str
    scopes: frozenset[Scope]


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, ErrorCode.unauthenticated, message, "Authorization", {"WWW-Authenticate": "Bearer"})


async def bearer(credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> str:  # noqa: B008
    """The presented key; 401 when there is none. Declaring it puts the bearer scheme in the OpenAPI."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials.strip():
        raise _unauthenticated("missing API key: send 'Authorization: Bearer <key>'")
    return credentials.credentials.strip()


async def presented_key(request: Request) -> str:
    """``bearer`` called directly, for a route that declares no dependencies (FastAPI's dependency
    resolution costs a poll more than the poll's own work): the same header rules, the same 401."""
    return await bearer(await _bearer(request))


class KeyCache:
    """Active keys' principals by key hash, each trusted for ``ttl_s`` after it was read from the store.
    ``clock`` is monotonic seconds (tests pass their own)."""

    def __init__(
        self,
        ttl_s: float = KEY_CACHE_TTL_S,
        *,
        max_entries: int = KEY_CACHE_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[str, tuple[float, Principal]] = {}  # key hash -> (read at, principal)
        self._lock = threading.Lock()  # written from the authenticator's executor threads

    def get(self, key_hash: str) -> Principal | None:
        entry = self._entries.get(key_hash)
        if entry is None:
            return None
        if self.clock() - entry[0] >= self.ttl_s:
            with self._lock:
                self._entries.pop(key_hash, None)
            return None
        return entry[1]

    def put(self, key_hash: str, principal: Principal, read_at: float) -> None:
        """Remember a principal read from the store at ``read_at`` (taken before the read began)."""
        if self.ttl_s <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key_hash] = (read_at, principal)


def _principal_of(record: ApiKey) -> Principal:
    return Principal(key_id=record.id, project=record.project, scopes=frozenset(record.scopes))


def _refused(decision: RateDecision) -> ApiError:
    return ApiError(
        429,
        ErrorCode.rate_limited,
        "rate limit exceeded for this API key",
        None,
        decision.headers(),  # Retry-After and the RateLimit-* fields
    )


def _checked_scope(principal: Principal, scope: Scope) -> Principal:
    if scope not in principal.scopes:
        raise ApiError(403, ErrorCode.insufficient_scope, f"this API key lacks the scope {scope.value!r}")
    return principal


class Authenticator:
    """Turns a presented key into a ``Principal``: ``await auth.authorize(key, Scope.generations_read)``."""

    def __init__(self, keys: KeyStore, limiter: RateLimiter, *, cache: KeyCache | None = None) -> None:
        self.keys = keys
        self.limiter = limiter
        self.cache = cache or KeyCache()
        # Key-store reads that miss the cache: a thread each, off the event loop.
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="genworker-auth")

    async def authorize(self, key: str, scope: Scope) -> Principal:
        """The key's principal: 401 for an unknown or revoked key, then 429 past its rate limit, then 403
        without ``scope``. The rate decision is noted for the answer's ``RateLimit-*`` headers."""
        principal = await self._principal(key)
        decision = await self.limiter.hit(principal.key_id)
        note_decision(decision)
        if not decision.allowed:
            raise _refused(decision)
        return _checked_scope(principal, scope)

    async def still_valid(self, key: str) -> bool:
        """Whether ``key`` is still an active key (no rate limit spent): what a long-lived answer, an event
        stream, asks now and then, so a revocation ends it within the cache's bound and its own cadence."""
        try:
            await self._principal(key)
        except ApiError:
            return False
        return True

    async def _principal(self, key: str) -> Principal:
        principal = self.cache.get(hash_key(key))
        if principal is None:
            principal = await asyncio.get_running_loop().run_in_executor(self._executor, self._lookup, key)
        return principal

    def _lookup(self, key: str) -> Principal:
        """The key store's record of ``key`` (an executor thread), kept in the cache while active."""
        key_hash = hash_key(key)
        cached = self.cache.get(key_hash)
        if cached is not None:
            return cached
        read_at = self.cache.clock()
        record = self.keys.authenticate(key)
        if record is None:
            raise _unauthenticated("invalid or revoked API key")
        principal = _principal_of(record)
        self.cache.put(key_hash, principal, read_at)
        return principal

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

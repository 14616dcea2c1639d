"""Bearer-key authentication, scopes and per-key rate limits.

Two steps, so that a request costs one threadpool hop (FastAPI runs every sync dependency on a thread
of its own; a hop costs about as much as the rest of a poll, docs/benchmarks.md):

- ``bearer`` (async, no I/O, a route dependency): a missing or malformed ``Authorization`` header is 401
  before anything else is looked at;
- ``Authenticator.principal`` (sync, called first thing in each route's body, on the route's thread):
  an unknown or revoked key is 401 (with ``WWW-Authenticate: Bearer``); then the key's rate limit (429
  with ``Retry-After``); then the scope (403).

A key acts for one project; a generation of another project is answered 404 by the routes, never 403,
so ids do not leak.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.keys import KeyStore, Scope
from api.limits import RateLimiter
from worker.core.errors import ErrorCode

__all__ = ["Authenticator", "Principal", "bearer"]

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


class Authenticator:
    """Turns a presented key into a ``Principal``: ``svc.auth.principal(key, Scope.generations_read)``."""

    def __init__(self, keys: KeyStore, limiter: RateLimiter) -> None:
        self.keys = keys
        self.limiter = limiter

    def principal(self, key: str, scope: Scope) -> Principal:
        record = self.keys.authenticate(key)
        if record is None:
            raise _unauthenticated("invalid or revoked API key")
        decision = self.limiter.hit(record.id)
        if not decision.allowed:
            raise ApiError(
                429,
                ErrorCode.rate_limited,
                "rate limit exceeded for this API key",
                None,
                {"Retry-After": str(decision.retry_after_s)},
            )
        if scope not in record.scopes:
            raise ApiError(403, ErrorCode.insufficient_scope, f"this API key lacks the scope {scope.value!r}")
        return Principal(key_id=record.id, project=record.project, scopes=frozenset(record.scopes))

"""Bearer-key authentication, scopes and per-key rate limits, as FastAPI dependencies.

Order of checks: a missing, unknown or revoked key is 401 (with ``WWW-Authenticate: Bearer``); then
the key's rate limit (429 with ``Retry-After``); then the scope (403). A key acts for one project; a
generation of another project is answered 404 by the routes, never 403, so ids do not leak.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.keys import ApiKey, KeyStore, Scope
from api.limits import RateLimiter
from worker.errors import ErrorCode

__all__ = ["Authenticator", "Principal"]

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


class Authenticator:
    """Builds the dependency each route declares: ``Depends(auth.require(Scope.generations_read))``."""

    def __init__(self, keys: KeyStore, limiter: RateLimiter) -> None:
        self.keys = keys
        self.limiter = limiter

    def authenticate(self, credentials: HTTPAuthorizationCredentials | None) -> ApiKey:
        if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
            raise _unauthenticated("missing API key: send 'Authorization: Bearer <key>'")
        record = self.keys.authenticate(credentials.credentials.strip())
        if record is None:
            raise _unauthenticated("invalid or revoked API key")
        return record

    def require(self, scope: Scope) -> Callable[..., Principal]:
        def dependency(credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Principal:  # noqa: B008
            record = self.authenticate(credentials)
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

        return dependency

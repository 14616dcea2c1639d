"""Playground sessions and their CSRF tokens: stateless, signed, shared by every API replica.

A session is a random id and an expiry, carried in an HttpOnly, SameSite=Strict cookie as
``<id>.<expires>.<signature>``. Its CSRF token is an HMAC of the id. Both are signed with a secret
derived from the playground's API key, so every replica holding that key accepts every replica's
sessions with no shared store, and rotating the key ends every session. Signatures and tokens are
compared with ``hmac.compare_digest``.

Why a token on top of a SameSite=Strict cookie: the token is sent in a request header that only
same-origin script can set (a cross-site page would need CORS, which the API never grants), so a
browser that ignores SameSite, or a sibling subdomain that counts as same-site, still cannot act.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COOKIE_NAME", "CSRF_HEADER", "Session", "SessionSigner"]

COOKIE_NAME = "genworker_playground"
CSRF_HEADER = "X-CSRF-Token"
_SECRET_LABEL = b"genworker playground session v1"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class Session:
    id: str
    expires_at: int  # unix seconds


class SessionSigner:
    """Issues and reads session cookies; makes and checks the CSRF token of a session."""

    def __init__(self, api_key: str, ttl_s: int, *, clock: Callable[[], float] = time.time) -> None:
        self._secret = hmac.new(api_key.encode("utf-8"), _SECRET_LABEL, hashlib.sha256).digest()
        self.ttl_s = ttl_s
        self._clock = clock

    def now(self) -> float:
        return self._clock()

    def _sign(self, purpose: str, value: str) -> str:
        return _b64(hmac.new(self._secret, f"{purpose}:{value}".encode("ascii"), hashlib.sha256).digest())

    def issue(self, renew: Session | None = None) -> tuple[Session, str]:
        """A new session (or ``renew`` with a new expiry: same id, so its CSRF token stays valid in open
        tabs) and its cookie value."""
        session_id = renew.id if renew is not None else secrets.token_urlsafe(24)
        session = Session(id=session_id, expires_at=int(self._clock()) + self.ttl_s)
        body = f"{session.id}.{session.expires_at}"
        return session, f"{body}.{self._sign('cookie', body)}"

    def read(self, cookie: str | None) -> Session | None:
        """The session a cookie value carries; None when it is absent, malformed, forged or expired."""
        if not cookie or len(cookie) > 256:
            return None
        parts = cookie.split(".")
        if len(parts) != 3 or not parts[1].isascii() or not parts[1].isdigit():
            return None
        session_id, expires, signature = parts
        if not session_id.isascii() or not hmac.compare_digest(
            signature.encode("ascii", "replace"), self._sign("cookie", f"{session_id}.{expires}").encode("ascii")
        ):
            return None
        if int(expires) <= self._clock():
            return None
        return Session(id=session_id, expires_at=int(expires))

    def csrf_token(self, session: Session) -> str:
        return self._sign("csrf", session.id)

    def token_matches(self, session: Session, token: str | None) -> bool:
        if not token:
            return False
        return hmac.compare_digest(token.encode("ascii", "replace"), self.csrf_token(session).encode("ascii"))

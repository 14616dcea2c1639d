"""The checks every playground API request passes before it may act for the project.

In order, each a 403 ``invalid_request`` naming the header to blame (no API key would help, so not
the 401 of a key):

1. ``Host`` is one the operator named (``api.playground_hosts``; by default the API's own loopback
   address and the host of ``store.public_base_url``). A page on an attacker's domain that rebinds its
   DNS to this server is same-origin with itself; this is the check that stops it.
2. ``Sec-Fetch-Site``, when the browser sends it, is ``same-origin``.
3. ``Origin``, when sent, is one of those hosts over http or https; an unsafe method (POST) must send it.
4. The session cookie is valid (signed, not expired).
5. ``X-CSRF-Token`` matches the session's token.

The page itself (``GET /``) passes only the first check: a link from anywhere may open it. Where the
playground serves a non-loopback bind (``api.playground_remote``), the page issues no session until the
browser signs in with the playground's key (``POST /playground/sign-in``, checks 1 to 3, the key compared
in constant time): reaching the port is then not enough to act for the project.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from api.errors import ApiError
from api.playground.session import COOKIE_NAME, CSRF_HEADER, Session, SessionSigner
from foundation.core.errors import ErrorCode
from foundation.settings import Settings

__all__ = ["RequestGuard", "allowed_hosts"]

_SAFE_METHODS = frozenset({"GET", "HEAD"})


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """``api.playground_hosts``, else the loopback names of the API's port plus the public base URL's host."""
    api = settings.api
    if api.playground_hosts:
        return frozenset(h.lower() for h in api.playground_hosts)
    hosts = {f"127.0.0.1:{api.port}", f"localhost:{api.port}", f"[::1]:{api.port}", f"{api.host}:{api.port}"}
    public = urlsplit(settings.store.public_base_url or "").netloc
    if public:
        hosts.add(public)
    return frozenset(h.lower() for h in hosts)


def _refused(message: str, param: str) -> ApiError:
    return ApiError(403, ErrorCode.invalid_request, message, param)


class RequestGuard:
    """Applies the module's checks to one request's method and headers (lower-case names)."""

    def __init__(self, signer: SessionSigner, hosts: frozenset[str]) -> None:
        self.signer = signer
        self.hosts = hosts
        self.origins = frozenset(f"{scheme}://{host}" for host in hosts for scheme in ("http", "https"))

    def check_host(self, headers: Mapping[str, str]) -> None:
        if "*" in self.hosts:
            return
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            raise _refused(f"the playground does not answer for host {host!r} (api.playground_hosts)", "Host")

    def _origins_for(self, host: str) -> frozenset[str]:
        """With ``*`` (any host), the request's own host is the one origin allowed."""
        if "*" in self.hosts:
            return frozenset({f"http://{host.lower()}", f"https://{host.lower()}"})
        return self.origins

    def check_api_call(self, method: str, headers: Mapping[str, str], cookies: Mapping[str, str]) -> Session:
        """The caller's session, when the request passes every check; else ``ApiError`` 403."""
        self.check_same_origin(method, headers)
        session = self.signer.read(cookies.get(COOKIE_NAME))
        if session is None:
            raise _refused("no valid playground session: reload the page", "Cookie")
        if not self.signer.token_matches(session, headers.get(CSRF_HEADER.lower())):
            raise _refused("missing or wrong CSRF token: reload the page", CSRF_HEADER)
        return session

    def check_same_origin(self, method: str, headers: Mapping[str, str]) -> None:
        """Checks 1 to 3 (host, fetch metadata, origin): a call from this page, or ``ApiError`` 403."""
        self.check_host(headers)
        site = headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            raise _refused(f"cross-site request refused (Sec-Fetch-Site: {site})", "Sec-Fetch-Site")
        origin = headers.get("origin")
        if origin is None and method not in _SAFE_METHODS:
            raise _refused("a playground call that changes state must send Origin", "Origin")
        if origin is not None and origin.lower() not in self._origins_for(headers.get("host", "")):
            raise _refused(f"cross-origin request refused (Origin: {origin})", "Origin")

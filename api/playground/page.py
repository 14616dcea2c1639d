"""``GET /``: the playground page, with a session cookie and the session's CSRF token in a meta tag.

Where the playground serves a non-loopback bind (``api.playground_remote``), a browser without a session
gets the sign-in page instead (``signin.html``, no session, no token) and ``POST /playground/sign-in``
with the playground's key (compared in constant time) issues the session and sends it back to ``/``.

The page is one HTML file whose script and styles are served from ``/playground/static`` (no CDN, no
inline script), under a Content-Security-Policy that allows scripts and API calls to this origin only
and media from anywhere (S3 signed URLs live on the store's host). The HTML is never cached: it
carries the session's token.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.errors import ApiError
from api.playground.guard import RequestGuard
from api.playground.session import COOKIE_NAME, Session, SessionSigner
from foundation.core.errors import ErrorCode

__all__ = ["PAGE_FILE", "SIGN_IN_PATH", "STATIC_DIR", "STATIC_PATH", "build_page_router"]

STATIC_PATH = "/playground/static"
STATIC_DIR = Path(__file__).with_name("static")
PAGE_FILE = Path(__file__).with_name("page.html")
SIGN_IN_FILE = Path(__file__).with_name("signin.html")
SIGN_IN_PATH = "/playground/sign-in"
_TOKEN_SLOT = "{{csrf_token}}"
_MESSAGE_SLOT = "{{message}}"

_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data: blob: http: https:; media-src 'self' blob: http: https:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # signed artifact URLs are not leaked to other sites
}


def build_page_router(guard: RequestGuard, signer: SessionSigner, *, key: str | None = None) -> APIRouter:
    """``key``: the playground's key, when a browser must sign in with it before it gets a session
    (``api.playground_remote``); None: every browser that opens the page gets one (a loopback bind)."""
    router = APIRouter(include_in_schema=False)
    template = PAGE_FILE.read_text(encoding="utf-8")
    sign_in = SIGN_IN_FILE.read_text(encoding="utf-8")
    if _TOKEN_SLOT not in template or _MESSAGE_SLOT not in sign_in:
        raise RuntimeError(f"{PAGE_FILE} has no {_TOKEN_SLOT} slot, or {SIGN_IN_FILE} no {_MESSAGE_SLOT} slot")

    def with_cookie(response: Response, request: Request, cookie: str) -> Response:
        response.set_cookie(
            COOKIE_NAME,
            cookie,
            max_age=signer.ttl_s,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @router.get("/")
    def playground_page(request: Request) -> Response:
        guard.check_host(request.headers)
        session: Session | None = signer.read(request.cookies.get(COOKIE_NAME))
        if session is None and key is not None:  # no session is issued without the key
            return HTMLResponse(sign_in.replace(_MESSAGE_SLOT, ""), headers=_HEADERS)
        cookie = None
        # A session past half its life is renewed, so an open tab does not expire mid-generation.
        if session is None or session.expires_at - signer.now() < signer.ttl_s / 2:
            session, cookie = signer.issue(renew=session)
        response = HTMLResponse(template.replace(_TOKEN_SLOT, signer.csrf_token(session)), headers=_HEADERS)
        return response if cookie is None else with_cookie(response, request, cookie)

    if key is not None:

        @router.post(SIGN_IN_PATH)
        async def playground_sign_in(request: Request) -> Response:
            guard.check_same_origin("POST", request.headers)
            form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=4)
            given = (form.get("key") or [""])[0].strip()
            if not hmac.compare_digest(given.encode("utf-8"), key.encode("utf-8")):
                raise ApiError(403, ErrorCode.invalid_request, "wrong playground key", "key")
            _session, cookie = signer.issue()
            return with_cookie(RedirectResponse("/", status_code=303, headers=_HEADERS), request, cookie)

    return router

"""``GET /``: the playground page, with a session cookie and the session's CSRF token in a meta tag.

The page is one HTML file whose script and styles are served from ``/playground/static`` (no CDN, no
inline script), under a Content-Security-Policy that allows scripts and API calls to this origin only
and media from anywhere (S3 signed URLs live on the store's host). The HTML is never cached: it
carries the session's token.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from api.playground.guard import RequestGuard
from api.playground.session import COOKIE_NAME, SessionSigner

__all__ = ["PAGE_FILE", "STATIC_DIR", "STATIC_PATH", "build_page_router"]

STATIC_PATH = "/playground/static"
STATIC_DIR = Path(__file__).with_name("static")
PAGE_FILE = Path(__file__).with_name("page.html")
_TOKEN_SLOT = "{{csrf_token}}"

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


def build_page_router(guard: RequestGuard, signer: SessionSigner) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    template = PAGE_FILE.read_text(encoding="utf-8")
    if _TOKEN_SLOT not in template:
        raise RuntimeError(f"{PAGE_FILE} has no {_TOKEN_SLOT} slot")

    @router.get("/")
    def playground_page(request: Request) -> HTMLResponse:
        guard.check_host(request.headers)
        session = signer.read(request.cookies.get(COOKIE_NAME))
        cookie = None
        # A session past half its life is renewed, so an open tab does not expire mid-generation.
        if session is None or session.expires_at - signer.now() < signer.ttl_s / 2:
            session, cookie = signer.issue(renew=session)
        response = HTMLResponse(template.replace(_TOKEN_SLOT, signer.csrf_token(session)), headers=_HEADERS)
        if cookie is not None:
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

    return router

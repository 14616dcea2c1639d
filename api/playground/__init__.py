"""The playground: a browser page at ``/`` to pick a model, type a prompt and watch the clip being made.

Off unless the operator turns it on (``api.playground``, with ``api.playground_api_key``); ``genworker
up`` turns it on for its dev project on a loopback bind. On any other bind it needs
``api.playground_remote``, and then each browser signs in with the key before it gets a session
(``page``). The browser never holds an API key: the page calls same-origin routes under
``/playground/api`` (``forward``), which pass a session and CSRF check (``guard``, ``session``) and then
act for the project with the server-held key. Static assets (``page.html``, ``signin.html``,
``static/``) are plain HTML, CSS and JavaScript with no dependencies, served by the API itself.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.context import ApiContext
from api.playground.forward import API_PATH, PlaygroundApi
from api.playground.guard import RequestGuard, allowed_hosts
from api.playground.page import STATIC_DIR, STATIC_PATH, build_page_router
from api.playground.session import SessionSigner

__all__ = ["install_playground"]


def install_playground(app: FastAPI, ctx: ApiContext) -> None:
    """Add the page, its assets and its API to ``app`` when the settings turn the playground on."""
    api = ctx.settings.api
    if not api.playground or api.playground_api_key is None:
        return
    key = api.playground_api_key.get_secret_value()
    signer = SessionSigner(key, api.playground_session_ttl_s)
    guard = RequestGuard(signer, allowed_hosts(ctx.settings))
    # Beyond loopback (api.playground_remote), a browser signs in with the key before it gets a session.
    app.include_router(build_page_router(guard, signer, key=key if api.playground_remote else None))
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC_DIR), name="playground-static")
    app.mount(API_PATH, PlaygroundApi(lambda: app, guard, key, ctx.catalog), name="playground-api")

"""``GET /v1/models``: the public catalog with live availability and queue depth. No key needed.

Anyone may call it, so it is the cheapest call of the API rather than its dearest: the body is computed
at most once per ``REFRESH_S`` per process (``api/catalog_body.py``: one read of the live workers, one
queue depth per model, no write anywhere) and served from memory in between, with an ``ETag`` (a request
whose ``If-None-Match`` names it is answered 304 with no body) and ``Cache-Control: max-age`` of a few
seconds, so clients and proxies ask less. Availability and depth are then up to ``REFRESH_S`` old, which
no client can tell from a heartbeat that lands a moment later. Like a poll, it is answered before the
framework's routing and middleware (``api/fast_path.py``) when it carries no query string.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api.catalog_body import MAX_AGE_S, REFRESH_S, CatalogBody
from api.context import context
from api.error_handlers import responses_for
from api.query import only_query
from api.views import ModelList

__all__ = ["MAX_AGE_S", "MODELS_ROUTE", "REFRESH_S", "CatalogBody", "answer_models", "router"]

MODELS_ROUTE = "/v1/models"


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


async def answer_models(catalog: CatalogBody, request: Request) -> Response:
    """``GET /v1/models``: the body, or 304 when ``If-None-Match`` names its tag (also called outside the
    framework: api/fast_path.py)."""
    body, etag = await catalog.get()
    headers = {"ETag": etag, "Cache-Control": f"max-age={MAX_AGE_S}"}
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


router = APIRouter(prefix=MODELS_ROUTE, tags=["models"])


@router.get(
    "",
    response_model=ModelList,
    summary="The model catalog",
    description=(
        f"Computed at most once a second per API process; `ETag` (send it back as `If-None-Match` for "
        f"a 304) and `Cache-Control: max-age={MAX_AGE_S}`."
    ),
    responses={**responses_for(), 304: {"description": "Not modified: the body named by `If-None-Match`."}},
    dependencies=[only_query()],
)
async def list_models(request: Request) -> Response:
    return await answer_models(context(request).models, request)

"""``GET /v1/models``: the public catalog with live availability and queue depth. No key needed."""

from __future__ import annotations

from fastapi import APIRouter

from api.context import ApiContext
from api.errors import responses_for
from api.query import only_query
from api.views import ModelList, model_view

__all__ = ["build_router"]


def build_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/models", tags=["models"])

    @router.get(
        "",
        response_model=ModelList,
        summary="The model catalog",
        responses=responses_for(),
        dependencies=[only_query()],
    )
    def list_models() -> ModelList:
        hosted: set[str] = set()
        for beat in ctx.queue.live_workers():
            hosted.update(beat.hosted_models)
        return ModelList(
            data=[
                model_view(spec, available=spec.id in hosted, queue_depth=ctx.queue.depth(spec.id))
                for spec in ctx.catalog.models.values()
            ]
        )

    return router

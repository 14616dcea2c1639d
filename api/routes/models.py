"""``GET /v1/models``: the public catalog with live availability and queue depth. No key needed."""

from __future__ import annotations

from fastapi import APIRouter

from api.context import ApiContext
from api.error_handlers import responses_for
from api.query import only_query
from api.views import ModelList, ModelView, model_view
from foundation.core.catalog import ModelSpec

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
        beats = ctx.queue.live_workers()
        hosted = {model for beat in beats for model in beat.hosted_models}

        def view(spec: ModelSpec) -> ModelView:
            def serves(mode: str, variant: str) -> bool:
                return any(beat.serves(spec.id, mode, variant) for beat in beats)

            return model_view(spec, available=spec.id in hosted, queue_depth=ctx.queue.depth(spec.id), serves=serves)

        return ModelList(data=[view(spec) for spec in ctx.catalog.models.values()])

    return router

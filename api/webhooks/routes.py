"""``/v1/webhooks``: a project's webhook endpoints, their delivery logs, and manual redelivery.

Registering, removing and redelivering need ``generations:write``; reading needs ``generations:read``.
Another project's endpoint or delivery is "not found". The signing secret is in the create answer only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Authenticator, bearer
from api.error_handlers import responses_for
from api.errors import ApiError, UnknownDelivery, UnknownEndpoint, UrlRefused
from api.keys import Scope
from api.query import only_query
from api.webhooks.models import Attempt, Delivery, DeliveryState, Endpoint, EventType
from api.webhooks.service import MAX_URL_LENGTH, Webhooks
from foundation.core.errors import ErrorCode

__all__ = ["build_router"]

_ID = Path(min_length=1, max_length=64)


class EndpointCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=MAX_URL_LENGTH, description="https:// URL of the receiver.")
    events: list[EventType] | None = Field(default=None, min_length=1, description="Default: every event type.")


class EndpointView(BaseModel):
    id: str
    object: str = "webhook_endpoint"
    project: str
    url: str
    events: list[EventType]
    created_at: datetime
    disabled_at: datetime | None
    disabled_reason: str | None
    consecutive_failures: int
    circuit_open_until: datetime | None = Field(
        default=None, description="While set and in the future, the endpoint's deliveries wait (its circuit is open)."
    )


class EndpointCreated(EndpointView):
    secret: str = Field(description="The signing secret (`whsec_...`), shown only in this answer.")


class EndpointList(BaseModel):
    data: list[EndpointView]


class DeliveryView(BaseModel):
    id: str = Field(description="Also the `webhook-id` header of every attempt.")
    object: str = "webhook_delivery"
    endpoint_id: str
    event_type: EventType
    generation_id: str
    state: DeliveryState
    created_at: datetime
    next_attempt_at: datetime | None
    attempt_count: int
    attempts: list[Attempt]
    delivered_at: datetime | None
    failure_reason: str | None
    held_reason: str | None = Field(default=None, description="Why a pending delivery waits without an attempt.")


class DeliveryList(BaseModel):
    data: list[DeliveryView]


def endpoint_view(e: Endpoint) -> EndpointView:
    return EndpointView.model_validate(e.model_dump(exclude={"sealed_secret"}))


def delivery_view(d: Delivery) -> DeliveryView:
    return DeliveryView.model_validate(d.model_dump(exclude={"body", "project"}))


def build_router(auth: Authenticator, webhooks: Webhooks) -> APIRouter:
    router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
    key = Depends(bearer)

    def owned(endpoint_id: str, project: str) -> Endpoint:
        try:
            return webhooks.endpoint(endpoint_id, project)
        except UnknownEndpoint:
            raise ApiError(404, ErrorCode.not_found, f"no webhook endpoint {endpoint_id!r}", "id") from None

    @router.post(
        "",
        status_code=201,
        response_model=EndpointCreated,
        dependencies=[only_query()],
        summary="Register a webhook endpoint for this project (the answer holds its secret, once)",
        responses=responses_for(401, 403, 429),
    )
    def create_endpoint(body: EndpointCreate, api_key: str = key) -> EndpointCreated:
        principal = auth.principal(api_key, Scope.generations_write)
        try:
            endpoint, secret = webhooks.add_endpoint(principal.project, body.url, body.events)
        except UrlRefused as e:
            raise ApiError(400, ErrorCode.invalid_webhook_url, str(e), "url") from None
        return EndpointCreated(**endpoint_view(endpoint).model_dump(), secret=secret)

    @router.get(
        "",
        response_model=EndpointList,
        dependencies=[only_query()],
        summary="List this project's webhook endpoints",
        responses=responses_for(401, 403, 429),
    )
    def list_endpoints(api_key: str = key) -> EndpointList:
        principal = auth.principal(api_key, Scope.generations_read)
        return EndpointList(data=[endpoint_view(e) for e in webhooks.store.list_endpoints(principal.project)])

    @router.delete(
        "/{endpoint_id}",
        status_code=204,
        dependencies=[only_query()],
        summary="Remove a webhook endpoint and its deliveries",
        responses=responses_for(401, 403, 404, 429),
    )
    def delete_endpoint(endpoint_id: Annotated[str, _ID], api_key: str = key) -> Response:
        principal = auth.principal(api_key, Scope.generations_write)
        owned(endpoint_id, principal.project)
        webhooks.store.remove_endpoint(endpoint_id)
        return Response(status_code=204)

    @router.get(
        "/{endpoint_id}/deliveries",
        response_model=DeliveryList,
        dependencies=[only_query("limit")],
        summary="The endpoint's delivery log, newest first, with each delivery's attempts",
        responses=responses_for(401, 403, 404, 429),
    )
    def list_deliveries(
        endpoint_id: Annotated[str, _ID], api_key: str = key, limit: int = Query(50, ge=1, le=200)
    ) -> DeliveryList:
        principal = auth.principal(api_key, Scope.generations_read)
        owned(endpoint_id, principal.project)
        return DeliveryList(data=[delivery_view(d) for d in webhooks.store.list_deliveries(endpoint_id, limit)])

    @router.post(
        "/{endpoint_id}/deliveries/{delivery_id}/redeliver",
        status_code=202,
        response_model=DeliveryView,
        dependencies=[only_query()],
        summary="Send a delivery again now, under the same webhook-id",
        responses=responses_for(401, 403, 404, 429),
    )
    def redeliver(
        endpoint_id: Annotated[str, _ID], delivery_id: Annotated[str, _ID], api_key: str = key
    ) -> DeliveryView:
        principal = auth.principal(api_key, Scope.generations_write)
        owned(endpoint_id, principal.project)
        try:
            return delivery_view(webhooks.redeliver(delivery_id, endpoint_id))
        except UnknownDelivery:
            raise ApiError(404, ErrorCode.not_found, f"no delivery {delivery_id!r}", "delivery_id") from None

    return router

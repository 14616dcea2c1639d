"""``/v1/webhooks``: a project's webhook endpoints, their delivery logs, and manual redelivery; the signing
secret of its per-request webhooks and their deliveries.

Registering, removing and redelivering need ``generations:write``; reading needs ``generations:read``.
Another project's endpoint or delivery is "not found". An endpoint's signing secret is in its create
answer only. The project's per-request signing secret (``api.webhooks.project_secrets``) is read and
rotated with ``generations:write``: a read key (a dashboard's) never learns what forges a webhook.

The routes are declared here once, at module level, with FastAPI dependencies (``Depends(context)``, as
``api/routes/*``); ``create_app`` mounts ``router`` where the app has webhooks (``ApiContext.webhooks``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, TypeVar

from anyio import to_thread
from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from api.api_keys import Scope
from api.auth import bearer
from api.context import ApiContext, context
from api.error_handlers import responses_for
from api.errors import ApiError, UnknownDelivery, UnknownEndpoint, UrlRefused
from api.query import only_query
from api.webhooks.models import Attempt, Delivery, DeliveryState, Endpoint, EventType, ProjectSecret
from api.webhooks.project_secrets import DEFAULT_GRACE
from api.webhooks.service import MAX_URL_LENGTH, Webhooks
from foundation.core.errors import ErrorCode

__all__ = ["router"]

_ID = Path(min_length=1, max_length=64)
T = TypeVar("T")


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
    endpoint_id: str = Field(description="The endpoint; for a per-request webhook, its URL's origin (`rq_...`).")
    url: str | None = Field(default=None, description="A per-request webhook's URL (the create's webhook_url).")
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


class SigningSecretView(BaseModel):
    object: str = "webhook_signing_secret"
    project: str
    secret: str = Field(description="`whsec_...`: signs every per-request webhook (a create's webhook_url).")
    created_at: datetime
    previous_expires_at: datetime | None = Field(
        default=None, description="Until then the secret before the last rotation signs too (a second signature)."
    )


class SigningSecretRotate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grace_seconds: int = Field(
        default=int(DEFAULT_GRACE.total_seconds()),
        ge=0,
        le=7 * 86_400,
        description="How long the current secret keeps signing beside the new one (0: it stops at once).",
    )


def signing_secret_view(stored: ProjectSecret, secret: str) -> SigningSecretView:
    return SigningSecretView(
        project=stored.project, secret=secret, created_at=stored.created_at, previous_expires_at=stored.previous_until
    )


def endpoint_view(e: Endpoint) -> EndpointView:
    return EndpointView.model_validate(e.model_dump(exclude={"sealed_secret"}))


def delivery_view(d: Delivery) -> DeliveryView:
    return DeliveryView.model_validate(d.model_dump(exclude={"body", "project"}))


_CONTEXT = Depends(context)


def webhooks_of(ctx: ApiContext = _CONTEXT) -> Webhooks:
    """The app's webhooks: a route's dependency (the router is mounted only where the app has them)."""
    if ctx.webhooks is None:  # create_app mounts this router only with webhooks
        raise RuntimeError("the /v1/webhooks routes are mounted on an app without webhooks")
    return ctx.webhooks


# The store's and the sender's calls block (SQLite, or Redis's blocking client): every route runs them on
# a worker thread, one hop per request (``_blocking``), as the framework ran the routes when they were sync.
async def _blocking(call: Callable[..., T], *args: Any) -> T:
    return await to_thread.run_sync(call, *args)


def _owned(webhooks: Webhooks, endpoint_id: str, project: str) -> Endpoint:
    """The project's endpoint; another project's is "not found", as one that does not exist."""
    try:
        return webhooks.endpoint(endpoint_id, project)
    except UnknownEndpoint:
        raise ApiError(404, ErrorCode.not_found, f"no webhook endpoint {endpoint_id!r}", "id") from None


def _no_delivery(delivery_id: str) -> ApiError:
    return ApiError(404, ErrorCode.not_found, f"no delivery {delivery_id!r}", "delivery_id")


router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
_KEY = Depends(bearer)
_WEBHOOKS = Depends(webhooks_of)


@router.post(
    "",
    status_code=201,
    response_model=EndpointCreated,
    dependencies=[only_query()],
    summary="Register a webhook endpoint for this project (the answer holds its secret, once)",
    responses=responses_for(401, 403, 429),
)
async def create_endpoint(
    body: EndpointCreate, api_key: str = _KEY, ctx: ApiContext = _CONTEXT, webhooks: Webhooks = _WEBHOOKS
) -> EndpointCreated:
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    try:
        endpoint, secret = await _blocking(webhooks.add_endpoint, principal.project, body.url, body.events)
    except UrlRefused as e:
        raise ApiError(400, ErrorCode.invalid_webhook_url, str(e), "url") from None
    return EndpointCreated(**endpoint_view(endpoint).model_dump(), secret=secret)


@router.get(
    "/signing-secret",
    response_model=SigningSecretView,
    dependencies=[only_query()],
    summary="The secret that signs this project's per-request webhooks (made on first use)",
    responses=responses_for(401, 403, 429),
)
async def get_signing_secret(
    api_key: str = _KEY, ctx: ApiContext = _CONTEXT, webhooks: Webhooks = _WEBHOOKS
) -> SigningSecretView:
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    return signing_secret_view(*await _blocking(webhooks.signing_secret, principal.project))


@router.post(
    "/signing-secret/rotate",
    response_model=SigningSecretView,
    dependencies=[only_query()],
    summary="A new per-request signing secret; the current one also signs for grace_seconds (default 24 h)",
    responses=responses_for(401, 403, 429),
)
async def rotate_signing_secret(
    body: SigningSecretRotate | None = None,
    api_key: str = _KEY,
    ctx: ApiContext = _CONTEXT,
    webhooks: Webhooks = _WEBHOOKS,
) -> SigningSecretView:
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    grace = timedelta(seconds=(body or SigningSecretRotate()).grace_seconds)
    return signing_secret_view(*await _blocking(webhooks.rotate_signing_secret, principal.project, grace))


@router.get(
    "/generations/{generation_id}/deliveries",
    response_model=DeliveryList,
    dependencies=[only_query()],
    summary="The deliveries of a generation's own webhook (its create's webhook_url), oldest first",
    responses=responses_for(401, 403, 429),
)
async def list_request_deliveries(
    generation_id: Annotated[str, _ID], api_key: str = _KEY, ctx: ApiContext = _CONTEXT, webhooks: Webhooks = _WEBHOOKS
) -> DeliveryList:
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    found = await _blocking(webhooks.request_deliveries, generation_id, principal.project)
    return DeliveryList(data=[delivery_view(d) for d in found])


def _redeliver_request(webhooks: Webhooks, generation_id: str, delivery_id: str, project: str) -> Delivery:
    """Send a generation's own webhook delivery again; "not found" unless it is one of the project's."""
    if delivery_id not in {d.id for d in webhooks.request_deliveries(generation_id, project)}:
        raise _no_delivery(delivery_id)
    return webhooks.redeliver(delivery_id)


@router.post(
    "/generations/{generation_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=DeliveryView,
    dependencies=[only_query()],
    summary="Send a per-request webhook's delivery again now, under the same webhook-id",
    responses=responses_for(401, 403, 404, 429),
)
async def redeliver_request(
    generation_id: Annotated[str, _ID],
    delivery_id: Annotated[str, _ID],
    api_key: str = _KEY,
    ctx: ApiContext = _CONTEXT,
    webhooks: Webhooks = _WEBHOOKS,
) -> DeliveryView:
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    redelivered = await _blocking(_redeliver_request, webhooks, generation_id, delivery_id, principal.project)
    return delivery_view(redelivered)


@router.get(
    "",
    response_model=EndpointList,
    dependencies=[only_query()],
    summary="List this project's webhook endpoints",
    responses=responses_for(401, 403, 429),
)
async def list_endpoints(
    api_key: str = _KEY, ctx: ApiContext = _CONTEXT, webhooks: Webhooks = _WEBHOOKS
) -> EndpointList:
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    endpoints = await _blocking(webhooks.store.list_endpoints, principal.project)
    return EndpointList(data=[endpoint_view(e) for e in endpoints])


def _remove_endpoint(webhooks: Webhooks, endpoint_id: str, project: str) -> None:
    _owned(webhooks, endpoint_id, project)
    webhooks.store.remove_endpoint(endpoint_id)


@router.delete(
    "/{endpoint_id}",
    status_code=204,
    dependencies=[only_query()],
    summary="Remove a webhook endpoint and its deliveries",
    responses=responses_for(401, 403, 404, 429),
)
async def delete_endpoint(
    endpoint_id: Annotated[str, _ID], api_key: str = _KEY, ctx: ApiContext = _CONTEXT, webhooks: Webhooks = _WEBHOOKS
) -> Response:
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    await _blocking(_remove_endpoint, webhooks, endpoint_id, principal.project)
    return Response(status_code=204)


def _endpoint_deliveries(webhooks: Webhooks, endpoint_id: str, project: str, limit: int) -> list[Delivery]:
    _owned(webhooks, endpoint_id, project)
    return webhooks.store.list_deliveries(endpoint_id, limit)


@router.get(
    "/{endpoint_id}/deliveries",
    response_model=DeliveryList,
    dependencies=[only_query("limit")],
    summary="The endpoint's delivery log, newest first, with each delivery's attempts",
    responses=responses_for(401, 403, 404, 429),
)
async def list_deliveries(
    endpoint_id: Annotated[str, _ID],
    api_key: str = _KEY,
    limit: int = Query(50, ge=1, le=200),
    ctx: ApiContext = _CONTEXT,
    webhooks: Webhooks = _WEBHOOKS,
) -> DeliveryList:
    principal = await ctx.auth.authorize(api_key, Scope.generations_read)
    found = await _blocking(_endpoint_deliveries, webhooks, endpoint_id, principal.project, limit)
    return DeliveryList(data=[delivery_view(d) for d in found])


def _redeliver(webhooks: Webhooks, endpoint_id: str, delivery_id: str, project: str) -> Delivery:
    """Send one of the project's endpoint's deliveries again; "not found" for another's or none."""
    _owned(webhooks, endpoint_id, project)
    try:
        return webhooks.redeliver(delivery_id, endpoint_id)
    except UnknownDelivery:
        raise _no_delivery(delivery_id) from None


@router.post(
    "/{endpoint_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=DeliveryView,
    dependencies=[only_query()],
    summary="Send a delivery again now, under the same webhook-id",
    responses=responses_for(401, 403, 404, 429),
)
async def redeliver(
    endpoint_id: Annotated[str, _ID],
    delivery_id: Annotated[str, _ID],
    api_key: str = _KEY,
    ctx: ApiContext = _CONTEXT,
    webhooks: Webhooks = _WEBHOOKS,
) -> DeliveryView:
    principal = await ctx.auth.authorize(api_key, Scope.generations_write)
    return delivery_view(await _blocking(_redeliver, webhooks, endpoint_id, delivery_id, principal.project))

"""``ApiContext``: what every route works with (settings, backends, catalog, auth), built once by
``create_app`` and kept on the app (``app.state.context``); a route declares
``ctx: ApiContext = Depends(context)``, or calls ``context(request)`` where it declares no dependencies
(the poll and the create: ``api/fast_path.py``).

``queue`` is the API's one queue, async only (``AsyncApiQueue``, ``foundation/queue/async_api.py``: the
blocking ``ApiQueue`` stays the worker's and the command line's); ``images`` the process's
bound on input images decoded at once; ``streams`` the open event streams per key; ``models`` the
catalog body, shared by the route and the fast path; ``webhooks`` the signed webhooks, where the app has
them (a create's ``webhook_url`` is refused without)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request

from api.api_keys import KeyStore
from api.auth import Authenticator
from api.catalog_body import CatalogBody
from api.event_stream import StreamSlots
from api.input_image import ImageSlots
from foundation.core.catalog import Catalog
from foundation.queue.base import AsyncApiQueue
from foundation.settings import Settings
from foundation.stores.base import ArtifactStore

if TYPE_CHECKING:
    from api.webhooks.service import Webhooks

__all__ = ["ApiContext", "context"]


@dataclass(frozen=True)
class ApiContext:
    settings: Settings
    queue: AsyncApiQueue
    store: ArtifactStore
    catalog: Catalog
    keys: KeyStore
    auth: Authenticator
    images: ImageSlots  # the bound on input images read and decoded at once (api/input_image.py)
    streams: StreamSlots  # open event streams per key (api/routes/events.py)
    models: CatalogBody  # the body of GET /v1/models (api/catalog_body.py)
    webhooks: Webhooks | None = None


def context(request: Request) -> ApiContext:
    """The context of the app serving ``request`` (set by ``create_app``): a route's dependency."""
    ctx: ApiContext = request.app.state.context
    return ctx

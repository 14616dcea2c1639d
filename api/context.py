"""``ApiContext``: what every route works with (settings, backends, catalog, auth), built once by
``create_app`` and passed to the router factories. ``queue`` is the sync queue (list, cancel, models);
``aqueue`` its asyncio face for the poll and create routes (``foundation/queue/async_api.py``); ``images``
the process's bound on input images decoded at once."""

from __future__ import annotations

from dataclasses import dataclass

from api.auth import Authenticator
from api.input_image import ImageSlots
from api.keys import KeyStore
from foundation.core.catalog import Catalog
from foundation.queue.base import ApiQueue, AsyncApiQueue
from foundation.settings import Settings
from foundation.stores.base import ArtifactStore

__all__ = ["ApiContext"]


@dataclass(frozen=True)
class ApiContext:
    settings: Settings
    queue: ApiQueue
    aqueue: AsyncApiQueue
    store: ArtifactStore
    catalog: Catalog
    keys: KeyStore
    auth: Authenticator
    images: ImageSlots  # the bound on input images read and decoded at once (api/input_image.py)

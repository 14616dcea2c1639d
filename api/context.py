"""``ApiContext``: what every route works with (settings, backends, catalog, auth), built once by
``create_app`` and passed to the router factories."""

from __future__ import annotations

from dataclasses import dataclass

from api.auth import Authenticator
from api.keys import KeyStore
from worker.core.catalog import Catalog
from worker.queue.base import ApiQueue
from worker.settings import Settings
from worker.stores.base import ArtifactStore

__all__ = ["ApiContext"]


@dataclass(frozen=True)
class ApiContext:
    settings: Settings
    queue: ApiQueue
    store: ArtifactStore
    catalog: Catalog
    keys: KeyStore
    auth: Authenticator

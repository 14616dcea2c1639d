"""The dependencies every route uses, built once by ``create_app`` and passed to router factories."""

from __future__ import annotations

from dataclasses import dataclass

from api.auth import Authenticator
from api.keys import KeyStore
from worker.core.catalog import Catalog
from worker.queue.base import JobQueue
from worker.settings import Settings
from worker.stores.base import ArtifactStore

__all__ = ["Services"]


@dataclass(frozen=True)
class Services:
    settings: Settings
    queue: JobQueue
    store: ArtifactStore
    catalog: Catalog
    keys: KeyStore
    auth: Authenticator

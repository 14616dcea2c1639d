"""The worker's side of the persisted compile caches (``pipelines.runtime.compile_cache``): the settings'
directory, the artifact store as a second home for the artifacts, and ``compile_cache`` around a model's
load-time warm-up."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundation.stores.factory import load_or_create_secret
from pipelines.runtime.compile_cache import (
    ArtifactSource,
    CompileCacheDir,
    Persisted,
    model_key,
    persisted,
    refusal,
    use_inductor_dir,
    versions,
)

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec
    from foundation.settings import Settings
    from foundation.stores.base import ArtifactStore

__all__ = ["KEY_FILE", "STORE_PREFIX", "StoreArtifacts", "compile_cache"]

log = logging.getLogger("genworker.worker.compile_cache")

KEY_FILE = "compile-cache.key"  # in data_dir, beside the caches' directory, not in it
STORE_PREFIX = "compile-cache/"  # beside generations/, which the sweeper walks; nothing else is kept here
MAX_BLOB_BYTES = 1 << 30  # a larger read is cut short, fails to load, and the warm-up compiles


@dataclass(frozen=True)
class StoreArtifacts:
    """The artifact store as an ``ArtifactSource``: ``compile-cache/<versions>/<model key>.bin``."""

    store: ArtifactStore

    def read(self, key: str) -> bytes | None:
        return self.store.read_bytes(f"{STORE_PREFIX}{key}.bin", max_bytes=MAX_BLOB_BYTES)

    def write(self, key: str, blob: bytes) -> None:
        with tempfile.TemporaryDirectory(prefix="genworker-compile-") as tmp:
            path = Path(tmp) / "artifacts.bin"
            path.write_bytes(blob)
            self.store.put_file(f"{STORE_PREFIX}{key}.bin", path, content_type="application/octet-stream")


def _sealing_key(settings: Settings) -> bytes:
    """``models.compile_cache_key``, else the key file in the data dir (made once, 0600)."""
    if settings.models.compile_cache_key is not None:
        return settings.models.compile_cache_key.get_secret_value().encode()
    return load_or_create_secret(Path(settings.data_dir) / KEY_FILE)


@contextmanager
def compile_cache(settings: Settings, store: ArtifactStore, spec: ModelSpec, adapter: Any) -> Iterator[Persisted]:
    """Around a compiled model's warm-up: inductor's directory under ``models.compile_cache_dir`` and the
    model's artifacts loaded before, saved after (``pipelines.runtime.compile_cache.persisted``). An empty
    ``compile_cache_dir`` turns both off."""
    models = settings.models
    if not models.compile_cache_dir:
        yield Persisted(key="")
        return
    cache = CompileCacheDir(Path(models.compile_cache_dir))
    name = versions(adapter.device)
    refused = next(filter(None, map(refusal, [cache.root, cache.root / name, cache.inductor_dir(name)])), None)
    if refused is not None:  # inductor would unpickle what another user put there: compile, keep nothing
        log.warning("compile cache directory refused", extra={"model": spec.id, "reason": refused})
        yield Persisted(key="")
        return
    inductor = use_inductor_dir(cache, name)
    sources: list[ArtifactSource] = [cache]
    if models.compile_cache_in_store:
        sources.append(StoreArtifacts(store))
    key = f"{name}/{model_key(spec, adapter.profile, adapter.device)}"
    with persisted(key, sources, secret=_sealing_key(settings)) as done:
        yield done
    log.info(
        "compile cache",
        extra={
            "model": spec.id,
            "key": done.key,
            "found": done.found,
            "loaded": done.loaded,
            "saved": done.saved,
            "inductor_dir": str(inductor),
        },
    )

"""Build the configured artifact store.

``open_store`` does no network I/O: a worker calls ``S3Store.ensure_bucket()`` itself at start. The
API mounts the local store's download app (``api.artifacts``) at ``local.ARTIFACTS_PATH`` when the
store is local.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from foundation.stores.base import ArtifactStore
from foundation.stores.config import StoreSettings
from foundation.stores.local import LocalStore
from foundation.stores.s3 import S3Store

__all__ = ["SECRET_FILE", "load_or_create_secret", "open_store"]

# Under data_dir: shared by the API process and the worker process of one embedded install.
SECRET_FILE = "store-secret"


def open_store(settings: StoreSettings, *, data_dir: Path | str) -> ArtifactStore:
    if settings.backend == "s3":
        return S3Store(settings)
    data_dir = Path(data_dir)
    root = Path(settings.local_root)
    if not root.is_absolute():
        root = data_dir / root
    if settings.signing_secret is not None:
        secret = settings.signing_secret.get_secret_value().encode()
    else:
        secret = load_or_create_secret(data_dir / SECRET_FILE)
    return LocalStore(root, secret, settings.public_base_url, settings.url_ttl_s)


def load_or_create_secret(path: Path) -> bytes:
    """The signing secret at ``path``, created once (0600) if absent.

    Two processes starting together must end with the same secret: the new one is written to a temp
    file and published with ``os.link``, which fails if another process published first.
    """
    if path.exists():
        return _read_secret(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    secret = path.read_text().strip().encode()
    if len(secret) < 16:
        raise ValueError(f"{path} holds a signing secret shorter than 16 characters")
    return secret

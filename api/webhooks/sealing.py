"""Endpoint signing secrets: made here, shown once, stored encrypted.

A signing secret must be recoverable to sign, so it cannot be stored hashed as API keys are. It is
stored sealed with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) under a server key:
``webhooks.secret_key`` when set (the distributed mode: every API replica and sender shares it), else
``<data_dir>/webhooks-key``, made once with mode 0600 (the embedded mode). A database dump without
that key reveals no secret. Losing the key means re-creating the endpoints.
"""

from __future__ import annotations

import base64
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from api.errors import SealingError

__all__ = ["SECRET_PREFIX", "Sealer", "SealingError", "new_secret", "server_key"]

SECRET_PREFIX = "whsec_"  # the Standard Webhooks spelling: base64 of the raw key after it
KEY_FILE = "webhooks-key"


def new_secret() -> str:
    """A fresh endpoint secret: 24 random bytes, as Standard Webhooks libraries expect them."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def server_key(configured: str | None, data_dir: str | Path) -> bytes:
    """The configured key, else the data dir's key file (created on first use)."""
    if configured:
        return configured.encode("ascii")
    path = Path(data_dir) / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            pass
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(Fernet.generate_key())
    return path.read_bytes().strip()


class Sealer:
    """Seals and opens secrets; the key is read (or the key file made) on first use, so a process
    that never touches an endpoint secret never writes to the data dir."""

    def __init__(self, key: bytes | Callable[[], bytes]) -> None:
        self._key = key
        self._fernet: Fernet | None = None
        self._lock = threading.Lock()

    def _cipher(self) -> Fernet:
        with self._lock:
            if self._fernet is None:
                self._fernet = Fernet(self._key() if callable(self._key) else self._key)
            return self._fernet

    def seal(self, secret: str) -> str:
        return self._cipher().encrypt(secret.encode("ascii")).decode("ascii")

    def open(self, sealed: str) -> str:
        try:
            return self._cipher().decrypt(sealed.encode("ascii")).decode("ascii")
        except InvalidToken:
            raise SealingError("the webhook secret cannot be opened with this server key") from None

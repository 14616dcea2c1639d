"""Endpoint signing secrets: made here, shown once, stored encrypted.

A signing secret must be recoverable to sign, so it cannot be stored hashed as API keys are. It is
stored sealed with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) under a server key:
``webhooks.secret_key`` when set (required on Redis: every API replica and sender shares it), else
``<data_dir>/webhooks-key``, made once with mode 0600 (the embedded mode). A database dump without
that key reveals no secret. Losing the key means re-creating the endpoints.

Rotation: ``webhooks.secret_key`` may list several keys. The first seals new secrets, any of them opens
one, and ``reseal`` moves a secret under the first key, so an old key can be dropped once every stored
secret was resealed (``genworker webhooks reseal``).
"""

from __future__ import annotations

import base64
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from api.errors import SealingError

__all__ = ["SECRET_PREFIX", "Sealer", "SealingError", "new_secret", "server_keys"]

SECRET_PREFIX = "whsec_"  # the Standard Webhooks spelling: base64 of the raw key after it
KEY_FILE = "webhooks-key"


def new_secret() -> str:
    """A fresh endpoint secret: 24 random bytes, as Standard Webhooks libraries expect them."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def server_keys(configured: list[str], data_dir: str | Path) -> list[bytes]:
    """The configured keys (the sealing one first), else the data dir's key file (created on first use)."""
    if configured:
        return [k.encode("ascii") for k in configured]
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
    return [path.read_bytes().strip()]


class Sealer:
    """Seals with the first key and opens with any; the keys are read (or the key file made) on first
    use, so a process that never touches an endpoint secret never writes to the data dir."""

    def __init__(self, keys: bytes | list[bytes] | Callable[[], list[bytes]]) -> None:
        self._keys = keys
        self._fernets: list[Fernet] = []
        self._lock = threading.Lock()

    def _ciphers(self) -> list[Fernet]:
        with self._lock:
            if not self._fernets:
                keys = self._keys() if callable(self._keys) else self._keys
                self._fernets = [Fernet(k) for k in ([keys] if isinstance(keys, bytes) else keys)]
            return self._fernets

    def _cipher(self) -> MultiFernet:
        return MultiFernet(self._ciphers())

    def seal(self, secret: str) -> str:
        return self._cipher().encrypt(secret.encode("ascii")).decode("ascii")

    def open(self, sealed: str) -> str:
        try:
            return self._cipher().decrypt(sealed.encode("ascii")).decode("ascii")
        except InvalidToken:
            raise SealingError("the webhook secret cannot be opened with this server key") from None

    def reseal(self, sealed: str) -> str:
        """The same secret sealed under the first key; ``sealed`` itself if it already is."""
        try:
            self._ciphers()[0].decrypt(sealed.encode("ascii"))
        except InvalidToken:
            pass
        else:
            return sealed
        try:
            return self._cipher().rotate(sealed.encode("ascii")).decode("ascii")
        except InvalidToken:
            raise SealingError("the webhook secret cannot be opened with this server key") from None

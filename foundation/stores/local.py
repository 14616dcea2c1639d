"""The local directory store: artifacts under one root, downloads through HMAC-signed URLs.

For the embedded mode (one machine, no S3). Files are written atomically (temp file in the target
directory, fsync, ``os.replace``), so a reader never sees half a video. Keys are confined to the root.
A signed URL is ``{public_base_url}{ARTIFACTS_PATH}/{key}?expires=<unix>&sig=<hex>`` where ``sig`` is
HMAC-SHA256 over ``key`` and ``expires``; ``api.artifacts.artifact_app`` serves them. File system
errors (disk full, permissions) leave every public method as ``TransientError(upload_failed)``.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlencode

from foundation.core.errors import ErrorCode, JobError, TransientError
from foundation.stores.base import ListedObject, SignedUrl, StoredObject
from foundation.stores.errors import InvalidKey

__all__ = ["ARTIFACTS_PATH", "InvalidKey", "LocalStore", "check_key"]

# The URL path under ``public_base_url`` where signed URLs point and the API mounts ``artifact_app``.
# Defined here, once, because it is part of this store's signed-URL format: the store writes it into
# every URL it signs (workers build the same store with no HTTP server), and a store must not import
# the API layer above it. The API imports it to mount the file server where the URLs lead.
ARTIFACTS_PATH = "/v1/artifacts"
_COPY_BLOCK = 1 << 20
_MAX_KEY_CHARS = 1024


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative path (``a/b/c.mp4``), else raise ``InvalidKey``."""
    if not key or len(key) > _MAX_KEY_CHARS:
        raise InvalidKey("key must be 1..1024 characters")
    if key.startswith("/") or "\\" in key:
        raise InvalidKey(f"key must be a relative path with '/' separators: {key!r}")
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in key):
        raise InvalidKey(f"key contains control characters: {key!r}")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: no file name can hold them
        raise InvalidKey(f"key is not valid UTF-8: {key!r}") from None
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKey(f"key has an empty, '.' or '..' segment: {key!r}")
    return key


class LocalStore:
    def __init__(self, root: Path, secret: bytes, public_base_url: str, ttl_s: int) -> None:
        if len(secret) < 16:
            raise ValueError("the signing secret must be at least 16 bytes")
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._secret = secret
        self.public_base_url = public_base_url.rstrip("/")
        self.ttl_s = ttl_s

    def ensure_bucket(self) -> None:
        """Nothing to make: the root directory is made when the store opens."""

    def path_for(self, key: str) -> Path:
        """The file behind ``key``; raises ``InvalidKey`` for a key that is not confined to the root."""
        path = self.root.joinpath(*check_key(key).split("/"))
        # Belt and braces: a symlinked directory inside the root must not lead out of it either.
        with _translated(f"resolve {key}"):
            inside = path.resolve().is_relative_to(self.root)
        if not inside:
            raise InvalidKey(f"key leads outside the store: {key!r}")
        return path

    def put_file(self, key: str, path: Path, *, content_type: str, sha256: str | None = None) -> StoredObject:
        try:
            target = self.path_for(key)
        except InvalidKey as e:
            raise JobError(ErrorCode.upload_failed, str(e)) from None
        with _translated(f"store {key}"):
            digest, size = _copy_atomically(path, target)
        if sha256 is not None and digest != sha256:
            target.unlink(missing_ok=True)
            raise TransientError(ErrorCode.upload_failed, f"checksum mismatch for {key}: {digest} != {sha256}")
        return StoredObject(key=key, bytes=size, sha256=digest, content_type=content_type)

    def sign_url(self, key: str, *, ttl_s: int | None = None) -> SignedUrl:
        check_key(key)
        # Rounded up: the URL is valid for at least the TTL, never a fraction of a second less.
        expires = math.ceil(time.time()) + (self.ttl_s if ttl_s is None else ttl_s)
        query = urlencode({"expires": expires, "sig": self.signature(key, expires)})
        url = f"{self.public_base_url}{ARTIFACTS_PATH}/{quote(key, safe='/')}?{query}"
        return SignedUrl(url=url, expires_at=datetime.fromtimestamp(expires, UTC))

    def signature(self, key: str, expires: int) -> str:
        # The newline cannot occur in a key, so (key, expires) pairs never collide.
        message = f"{key}\n{expires}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def verify(self, key: str, expires: str | int, sig: str, now: float | None = None) -> bool:
        """True when ``sig`` signs (``key``, ``expires``) with this store's secret and has not expired."""
        try:
            check_key(key)
            expires_at = int(expires)
        except (TypeError, ValueError):  # InvalidKey is a ValueError
            return False
        if (time.time() if now is None else now) > expires_at:
            return False
        # Bytes, not str: compare_digest refuses non-ASCII str, and a URL can carry anything.
        return hmac.compare_digest(self.signature(key, expires_at).encode(), sig.encode("utf-8", "replace"))

    def read_bytes(self, key: str, *, max_bytes: int) -> bytes | None:
        path = self.path_for(key)
        with _translated(f"read {key}"):
            try:
                with path.open("rb") as f:
                    return f.read(max_bytes)
            except FileNotFoundError:
                return None

    def exists(self, key: str) -> bool:
        path = self.path_for(key)
        with _translated(f"check {key}"):
            return path.is_file()

    def delete(self, key: str) -> None:
        path = self.path_for(key)
        with _translated(f"delete {key}"):
            path.unlink(missing_ok=True)
            _remove_empty_parents(path.parent, self.root)

    def list_objects(self, prefix: str) -> Iterator[ListedObject]:
        # Walk only the directory the prefix names (``generations/`` → that folder), then filter.
        folder = self.root.joinpath(*[p for p in prefix.split("/")[:-1] if p])
        with _translated(f"list {prefix}"):
            for directory, _, files in os.walk(folder):
                for name in sorted(files):
                    path = Path(directory) / name
                    key = path.relative_to(self.root).as_posix()
                    if not key.startswith(prefix):
                        continue
                    try:
                        mtime = path.stat().st_mtime
                    except FileNotFoundError:  # renamed or deleted meanwhile
                        continue
                    yield ListedObject(key=key, modified_at=datetime.fromtimestamp(mtime, UTC))


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """``OSError`` (disk full, permissions, a lost mount) as ``TransientError(upload_failed)``: an
    operator can fix it, so the job is retried later rather than failed."""
    try:
        yield
    except OSError as e:
        raise TransientError(ErrorCode.upload_failed, f"cannot {what}: {e}") from e


def _copy_atomically(source: Path, target: Path) -> tuple[str, int]:
    """Copy ``source`` to ``target`` via a temp file in the same directory; return (sha256, bytes)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with open(fd, "wb") as out, source.open("rb") as src:
            while block := src.read(_COPY_BLOCK):
                digest.update(block)
                size += len(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return digest.hexdigest(), size


def _remove_empty_parents(directory: Path, root: Path) -> None:
    """Remove ``directory`` and its parents up to (not including) ``root`` while they are empty."""
    while directory != root and directory.is_relative_to(root):
        try:
            directory.rmdir()
        except OSError:  # not empty (or already gone): stop
            return
        directory = directory.parent


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

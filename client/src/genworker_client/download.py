"""Pieces of ``download`` both clients share: file names, the expiry rule, and a sink that hashes
while it writes and only renames the file into place once size and sha256 match the record.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

import httpx

from genworker_client.errors import IntegrityError
from genworker_client.models import Artifact, Generation

__all__ = [
    "CHUNK_BYTES",
    "URL_REFUSED_STATUSES",
    "ArtifactSink",
    "artifact_paths",
    "needs_fresh_url",
]

CHUNK_BYTES = 1 << 20

# Answers that mean "this signed URL no longer works" (expired or bad signature: 403 from S3 and from
# the local store; some stores say 401 or 410). A re-fetched generation carries a freshly signed URL.
URL_REFUSED_STATUSES: frozenset[int] = frozenset({401, 403, 410})

_EXTENSIONS = {"video/mp4": ".mp4", "image/jpeg": ".jpg", "image/png": ".png", "audio/mp4": ".m4a"}


def _extension(artifact: Artifact) -> str:
    if artifact.content_type:
        ext = _EXTENSIONS.get(artifact.content_type) or mimetypes.guess_extension(artifact.content_type)
        if ext:
            return ext
    if artifact.download_url:
        suffix = Path(httpx.URL(artifact.download_url).path).suffix
        if suffix:
            return suffix
    return ".bin"


def artifact_paths(generation: Generation, directory: Path) -> list[Path]:
    """``<id>-<kind><ext>`` per artifact (``<id>-<kind>-<n><ext>`` when a kind repeats)."""
    paths: list[Path] = []
    seen: dict[str, int] = {}
    for artifact in generation.artifacts:
        n = seen.get(artifact.kind, 0)
        seen[artifact.kind] = n + 1
        stem = f"{generation.id}-{artifact.kind}" + (f"-{n}" if n else "")
        paths.append(directory / f"{stem}{_extension(artifact)}")
    return paths


def needs_fresh_url(artifact: Artifact, *, now: datetime | None = None) -> bool:
    """No URL, or one whose ``expires_at`` has passed by this machine's clock (a skewed clock is caught
    later anyway: the store refuses the URL and the client re-fetches)."""
    if artifact.download_url is None:
        return True
    if artifact.expires_at is None:
        return False
    expires_at = artifact.expires_at
    if expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)
    return expires_at <= (now or datetime.now(UTC))


class ArtifactSink:
    """Writes ``<dest>.part`` while hashing; ``commit`` checks it against the record and renames it to
    ``dest``. Leaving the ``with`` block without a commit (an error, a retry) deletes the partial file."""

    def __init__(self, dest: Path, artifact: Artifact) -> None:
        self.dest = dest
        self.artifact = artifact
        self.part = dest.with_name(dest.name + ".part")
        self._hash = hashlib.sha256()
        self._size = 0
        self._committed = False

    def __enter__(self) -> ArtifactSink:
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.part.open("wb")
        return self

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self._hash.update(chunk)
        self._size += len(chunk)

    def commit(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        expected = self.artifact
        if expected.bytes is not None and expected.bytes != self._size:
            raise IntegrityError(self.dest.name, "size", f"{expected.bytes} bytes", f"{self._size} bytes")
        digest = self._hash.hexdigest()
        if expected.sha256 is not None and expected.sha256.lower() != digest:
            raise IntegrityError(self.dest.name, "sha256", expected.sha256, digest)
        os.replace(self.part, self.dest)
        self._committed = True

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._file.closed:
            self._file.close()
        if not self._committed:
            self.part.unlink(missing_ok=True)

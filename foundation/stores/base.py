"""The artifact store protocol: where encoded artifacts live and how clients reach them.

Two backends (``s3.S3Store``, ``local.LocalStore``), one shared test suite. The record keeps object
keys and metadata, never URLs: the API calls ``sign_url`` on every read.

Errors: a store raises only ``foundation.core.errors`` types, translated from its client library at each
method: ``JobError(upload_failed)`` when the store refuses (retrying cannot help) and
``TransientError(upload_failed)`` for trouble worth a retry, ``BackendUnavailable`` among them when
the store did not answer at all (and the local store's ``InvalidKey`` for a key outside its root).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

__all__ = [
    "ARTIFACTS_ROOT",
    "ArtifactStore",
    "ListedObject",
    "SignedUrl",
    "StoredObject",
    "artifact_key",
    "artifact_prefix",
    "claim_tag",
]

# The prefix of every artifact object: ``generations/<id>/<attempt>-<claim>/<file>``.
ARTIFACTS_ROOT = "generations/"


def claim_tag(token: str, claimed_at: datetime | None) -> str:
    """12 hex characters naming one claim: a hash of the claim's token and the time its start was written.

    The token alone is not enough: a failover that loses a claim's start can let the same worker take
    the same stream entry again, at the same attempt number and with the same Redis token, while the
    first claim is still uploading. Each claim writes its own start time (the record's ``updated_at`` as
    the claim returned it), so the two tags differ.
    """
    stamp = claimed_at.isoformat() if claimed_at is not None else ""
    return hashlib.sha256(f"{token}\n{stamp}".encode()).hexdigest()[:12]


def artifact_key(job_id: str, attempt: int, claim: str, filename: str) -> str:
    """``generations/<id>/<attempt>-<claim>/<filename>``, ``claim`` from ``claim_tag``: unique per claim, so
    a retry never clobbers an earlier attempt's objects and two holders of one attempt (after a failover)
    never touch each other's."""
    return f"{ARTIFACTS_ROOT}{job_id}/{attempt}-{claim}/{filename}"


def artifact_prefix(job_id: str) -> str:
    """The prefix of every object of one job, all attempts and claims."""
    return f"{ARTIFACTS_ROOT}{job_id}/"


@dataclass(frozen=True)
class StoredObject:
    key: str
    bytes: int
    sha256: str
    content_type: str


@dataclass(frozen=True)
class ListedObject:
    """One object as a listing shows it: what the sweeper needs to judge it."""

    key: str
    modified_at: datetime  # last write (UTC)


@dataclass(frozen=True)
class SignedUrl:
    url: str
    expires_at: datetime


class ArtifactStore(Protocol):
    def ensure_bucket(self) -> None:
        """Make what the store keeps objects in, if it is not there (S3: the bucket, private); a worker calls it
        once at start, so the first upload does not. Nothing to make for a store whose root exists once it opens."""
        ...

    def put_file(self, key: str, path: Path, *, content_type: str, sha256: str | None = None) -> StoredObject:
        """Upload ``path`` under ``key`` (multipart when large, bounded memory); verify the checksum.
        Transient trouble raises ``TransientError(upload_failed)`` after the store's own retries."""
        ...

    def sign_url(self, key: str, *, ttl_s: int | None = None) -> SignedUrl:
        """A fresh short-lived download URL for ``key`` (configured TTL when ``ttl_s`` is None)."""
        ...

    def read_bytes(self, key: str, *, max_bytes: int) -> bytes | None:
        """At most ``max_bytes`` of the object under ``key`` (a small input such as an image), None when there
        is none; a caller that expects n bytes asks for n + 1 to see a longer object. Trouble as ``put_file``."""
        ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def list_objects(self, prefix: str) -> Iterator[ListedObject]:
        """Every object whose key starts with ``prefix``, in pages (bounded memory). The local store
        lists its unfinished temporary files too (``.<name>.<random>.part``), so they can be swept."""
        ...

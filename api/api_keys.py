"""Project API keys: issued once, stored hashed, looked up by hash, revocable.

A key reads ``gw_<43 url-safe chars>`` (256 random bits from ``secrets``). Stores keep only its
SHA-256 and a short display prefix; the key itself is shown once, at creation. Two stores implement
``KeyStore``: ``SqliteKeyStore`` (embedded, ``<data_dir>/keys.db``) and ``RedisKeyStore``
(distributed, shared by every API replica). Revocation takes effect on the next request.

A key's project names Redis keys of the queue (its listing, its idempotency keys), so ``new_key``
refuses (``InvalidProject``) a name the queue's key scheme cannot hold, on both stores: a key issued
for such a name would fail every create with a 500, and an embedded service may move to Redis later.

Both stores translate their client library's "cannot answer now" errors (connection refused, timeout,
a locked database, a failover) into ``BackendUnavailable`` at each public method, with the queue's
own rules (``foundation.queue.unavailable``): the keys live beside the queue, on the same backend, so the
HTTP tier answers 503 for them without importing redis or sqlite3.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict

from api.errors import InvalidProject
from foundation.queue import keys as queue_keys
from foundation.queue.sqlite.db import SqliteFile
from foundation.queue.unavailable import redis_unavailable, sqlite_unavailable

if TYPE_CHECKING:
    import redis

__all__ = [
    "KEY_PREFIX",
    "ApiKey",
    "InvalidProject",
    "KeyStore",
    "RedisKeyStore",
    "Scope",
    "SqliteKeyStore",
    "check_project",
    "hash_key",
    "new_key",
]

KEY_PREFIX = "gw_"


class Scope(StrEnum):
    generations_write = "generations:write"
    generations_read = "generations:read"


class ApiKey(BaseModel):
    """A key's stored record; never holds the key itself."""

    model_config = ConfigDict(extra="ignore")

    id: str
    project: str
    scopes: list[Scope]
    key_hash: str
    display: str  # "gw_AbCd…" so an operator can tell keys apart
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def check_project(project: str) -> str:
    """``project`` unchanged, or ``InvalidProject`` saying which names are allowed. The rule is the
    queue's own (its key functions check every name they embed), so the two cannot drift apart."""
    try:
        queue_keys.project_jobs(project)
    except ValueError as e:  # its text names the allowed characters and length
        raise InvalidProject(str(e)) from None
    return project


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key(project: str, scopes: Iterable[Scope]) -> tuple[ApiKey, str]:
    """A fresh key and its record (the caller stores the record and shows the key once); raises
    ``InvalidProject`` for a name the queue cannot use."""
    check_project(project)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    record = ApiKey(
        id="key_" + secrets.token_hex(8),
        project=project,
        scopes=sorted(set(scopes)),
        key_hash=hash_key(key),
        display=key[:8] + "…",
        created_at=datetime.now(UTC),
    )
    return record, key


def _matches(record: ApiKey | None, key_hash: str) -> ApiKey | None:
    # The lookup is by hash already; the constant-time compare keeps a future prefix-index lookup safe.
    if record is not None and hmac.compare_digest(record.key_hash, key_hash):
        return record
    return None


class KeyStore(Protocol):
    def create(self, project: str, scopes: Iterable[Scope]) -> tuple[ApiKey, str]:
        """Store a new key; return its record and the key (shown once)."""
        ...

    def authenticate(self, key: str) -> ApiKey | None:
        """The active record for this key, or None (unknown or revoked)."""
        ...

    def list_keys(self, project: str | None = None) -> list[ApiKey]: ...

    def revoke(self, key_id: str) -> bool:
        """Revoke by id; False when there is no such key."""
        ...

    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    project TEXT NOT NULL,
    record TEXT NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0
)
"""


class SqliteKeyStore:
    """Keys in a SQLite file, through the queue's ``SqliteFile``: one connection per thread (the API
    calls it from a thread pool), closed when its thread ends, and the same write transaction."""

    @sqlite_unavailable
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = SqliteFile(str(self.path), synchronous="FULL")
        with self._db.tx() as conn:
            conn.execute(_SCHEMA)

    @sqlite_unavailable
    def create(self, project: str, scopes: Iterable[Scope]) -> tuple[ApiKey, str]:
        record, key = new_key(project, scopes)
        with self._db.tx() as conn:
            conn.execute(
                "INSERT INTO api_keys (id, key_hash, project, record) VALUES (?, ?, ?, ?)",
                (record.id, record.key_hash, record.project, record.model_dump_json()),
            )
        return record, key

    @sqlite_unavailable
    def authenticate(self, key: str) -> ApiKey | None:
        key_hash = hash_key(key)
        row = self._db.conn().execute("SELECT record FROM api_keys WHERE key_hash = ?", (key_hash,)).fetchone()
        record = _matches(ApiKey.model_validate_json(row[0]) if row else None, key_hash)
        return record if record is not None and record.active else None

    @sqlite_unavailable
    def list_keys(self, project: str | None = None) -> list[ApiKey]:
        sql, args = "SELECT record FROM api_keys", tuple[str, ...]()
        if project is not None:
            sql, args = sql + " WHERE project = ?", (project,)
        rows = self._db.conn().execute(sql + " ORDER BY rowid", args).fetchall()
        return [ApiKey.model_validate_json(r[0]) for r in rows]

    @sqlite_unavailable
    def revoke(self, key_id: str) -> bool:
        with self._db.tx() as conn:  # read, then write: one transaction
            row = conn.execute("SELECT record FROM api_keys WHERE id = ?", (key_id,)).fetchone()
            if row is None:
                return False
            record = ApiKey.model_validate_json(row[0])
            if record.revoked_at is None:
                record = record.model_copy(update={"revoked_at": datetime.now(UTC)})
            conn.execute("UPDATE api_keys SET record = ?, revoked = 1 WHERE id = ?", (record.model_dump_json(), key_id))
        return True

    @sqlite_unavailable
    def close(self) -> None:
        self._db.close()


# Redis keys: the record by key hash (the lookup on every request), and an id -> hash index for
# list and revoke. Each write touches one key, so the layout holds on Redis Cluster.
KEY_BY_HASH = "gw:apikey:{key_hash}"
KEY_INDEX = "gw:apikeys"


class RedisKeyStore:
    """Keys in Redis, shared by every API replica."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    @classmethod
    def from_url(cls, url: str) -> RedisKeyStore:
        import redis as redis_lib

        return cls(redis_lib.Redis.from_url(url, decode_responses=True))

    def _load(self, key_hash: str) -> ApiKey | None:
        raw = self.client.get(KEY_BY_HASH.format(key_hash=key_hash))
        return ApiKey.model_validate_json(str(raw)) if raw else None

    @redis_unavailable
    def create(self, project: str, scopes: Iterable[Scope]) -> tuple[ApiKey, str]:
        record, key = new_key(project, scopes)
        self.client.set(KEY_BY_HASH.format(key_hash=record.key_hash), record.model_dump_json())
        self.client.hset(KEY_INDEX, record.id, record.key_hash)
        return record, key

    @redis_unavailable
    def authenticate(self, key: str) -> ApiKey | None:
        key_hash = hash_key(key)
        record = _matches(self._load(key_hash), key_hash)
        return record if record is not None and record.active else None

    @redis_unavailable
    def list_keys(self, project: str | None = None) -> list[ApiKey]:
        index: dict[str, str] = dict(self.client.hgetall(KEY_INDEX))  # type: ignore[arg-type]
        records = [r for h in index.values() if (r := self._load(h)) is not None]
        records.sort(key=lambda r: r.created_at)
        return [r for r in records if project is None or r.project == project]

    @redis_unavailable
    def revoke(self, key_id: str) -> bool:
        key_hash = self.client.hget(KEY_INDEX, key_id)
        record = self._load(str(key_hash)) if key_hash else None
        if record is None:
            return False
        if record.revoked_at is None:
            record = record.model_copy(update={"revoked_at": datetime.now(UTC)})
            self.client.set(KEY_BY_HASH.format(key_hash=record.key_hash), record.model_dump_json())
        return True

    @redis_unavailable
    def close(self) -> None:
        self.client.close()

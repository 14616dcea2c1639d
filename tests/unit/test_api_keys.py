"""API key stores (SQLite and Redis): hashed at rest, scoped, revocable."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.api_keys import KEY_PREFIX, KeyStore, RedisKeyStore, Scope, SqliteKeyStore, hash_key
from foundation.core.errors import BackendUnavailable


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyStore]:
    keys: KeyStore
    if request.param == "sqlite":
        keys = SqliteKeyStore(tmp_path / "keys.db")
    else:
        server = request.getfixturevalue("redis_server")
        keys = RedisKeyStore.from_url(server.url)
    yield keys
    keys.close()


def test_create_then_authenticate(store: KeyStore) -> None:
    record, key = store.create("proj", [Scope.generations_read, Scope.generations_write])
    assert key.startswith(KEY_PREFIX) and len(key) > 40
    found = store.authenticate(key)
    assert found is not None
    assert (found.id, found.project) == (record.id, "proj")
    assert set(found.scopes) == {Scope.generations_read, Scope.generations_write}
    assert store.authenticate(key + "x") is None
    assert store.authenticate("") is None


def test_revoked_key_no_longer_authenticates(store: KeyStore) -> None:
    record, key = store.create("proj", [Scope.generations_read])
    assert store.revoke(record.id)
    assert store.authenticate(key) is None
    listed = {r.id: r for r in store.list_keys()}
    assert listed[record.id].revoked_at is not None
    assert not store.revoke("key_doesnotexist")


def test_list_filters_by_project_and_never_holds_the_key(store: KeyStore) -> None:
    _, key_a = store.create("alpha", [Scope.generations_read])
    _, key_b = store.create("beta", [Scope.generations_write])
    alpha = store.list_keys("alpha")
    assert [r.project for r in alpha] == ["alpha"]
    for r in store.list_keys():
        assert key_a not in r.model_dump_json() and key_b not in r.model_dump_json()
    assert {r.key_hash for r in store.list_keys()} >= {hash_key(key_a), hash_key(key_b)}


def test_sqlite_file_holds_only_the_hash(tmp_path: Path) -> None:
    keys = SqliteKeyStore(tmp_path / "keys.db")
    _, key = keys.create("proj", [Scope.generations_read])
    keys.close()
    dump = "\n".join(sqlite3.connect(tmp_path / "keys.db").iterdump())
    assert hash_key(key) in dump
    assert key not in dump and key[len(KEY_PREFIX) :] not in dump


def test_an_unreachable_backend_is_backend_unavailable(tmp_path: Path) -> None:
    """The key stores translate their client's errors: the HTTP tier answers 503 without importing them."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    redis_keys = RedisKeyStore.from_url(f"redis://127.0.0.1:{port}/0")
    for call in (lambda: redis_keys.authenticate("gw_x"), lambda: redis_keys.create("p", [Scope.generations_read])):
        with pytest.raises(BackendUnavailable) as info:
            call()
        assert info.value.__cause__ is not None
    redis_keys.close()
    (tmp_path / "keys.db").mkdir()  # a directory where the database file should be: cannot open it
    with pytest.raises(BackendUnavailable) as info:
        SqliteKeyStore(tmp_path / "keys.db")
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)

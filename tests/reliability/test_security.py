"""Security checks against a live ``genworker api`` process (SQLite queue and keys, local store served
through HMAC-signed URLs), its INFO log captured to a file, plus the Redis key store:

- API keys are stored hashed: the plaintext appears nowhere in the SQLite file or in Redis;
- signed URLs: expired, tampered, or moved to another key's path are refused (403);
- path traversal (``..``, ``%2e%2e``, encoded slashes) over raw HTTP never serves a file outside the store;
- the INFO log holds no API key, no prompt and no signed URL query string;
- ``GET /v1/models`` needs no key and leaks no endpoint, credential, path, adapter or hub id.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import redis

from api.api_keys import RedisKeyStore, Scope, SqliteKeyStore
from foundation.core.catalog import load_catalog
from foundation.settings import settings_env
from foundation.stores.config import StoreSettings
from foundation.stores.factory import open_store
from tests.e2e.conftest import create_body, free_port

SECRET = "reliability-signing-secret-0123456789"
PROMPT = "a secret prompt about a violet giraffe 7f3a"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("sec-api")
    port = free_port()
    keys = SqliteKeyStore(data / "keys.db")
    _rec, token = keys.create("alpha", [Scope.generations_read, Scope.generations_write])
    _rec2, other = keys.create("beta", [Scope.generations_read])
    keys.close()
    settings = {
        "data_dir": str(data),
        "log_level": "INFO",
        "queue": {"backend": "sqlite", "sqlite_path": str(data / "queue.db")},
        "store": {
            "backend": "local",
            "local_root": str(data / "artifacts"),
            "signing_secret": SECRET,
            "public_base_url": f"http://127.0.0.1:{port}",
        },
        "api": {"keys_backend": "sqlite"},
    }
    env = {**os.environ, **settings_env(settings)}
    log = data / "api.log"
    cmd = [sys.executable, "-m", "genworker.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "API did not start"
            time.sleep(0.2)
        settings = StoreSettings(
            backend="local", local_root=str(data / "artifacts"), signing_secret=SECRET, public_base_url=base
        )
        store = open_store(settings, data_dir=data)
        yield {"base": base, "token": token, "other": other, "data": data, "log": log, "store": store}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def put_object(api: dict[str, Any], key: str, body: bytes) -> None:
    src = api["data"] / "src.bin"
    src.write_bytes(body)
    api["store"].put_file(key, src, content_type="video/mp4")


def raw_get(base: str, target: str) -> tuple[int, bytes]:
    """A GET with the request target exactly as given (no client-side normalisation of ``..``)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return int(reply.split(b" ", 2)[1]), reply


def test_keys_are_stored_hashed_in_sqlite_and_redis(tmp_path: Path, redis_url: str) -> None:
    sqlite = SqliteKeyStore(tmp_path / "keys.db")
    _r, token = sqlite.create("p", [Scope.generations_read])
    sqlite.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert token.encode() not in raw
    assert hashlib.sha256(token.encode()).hexdigest().encode() in raw
    store = RedisKeyStore.from_url(redis_url)
    _r2, token2 = store.create("p", [Scope.generations_read])
    assert store.authenticate(token2) is not None
    client = redis.Redis.from_url(redis_url)
    dump = b""
    for key in client.scan_iter("*"):
        dump += key + (client.dump(key) or b"")
    client.close()
    assert token2.encode() not in dump
    assert hashlib.sha256(token2.encode()).hexdigest().encode() in dump


def test_signed_urls_refuse_expired_tampered_and_moved(api: dict[str, Any]) -> None:
    store = api["store"]
    put_object(api, "generations/gen_a/1/video.mp4", b"A" * 100)
    put_object(api, "generations/gen_b/1/video.mp4", b"B" * 100)
    good = store.sign_url("generations/gen_a/1/video.mp4").url
    assert httpx.get(good).content == b"A" * 100
    expired = store.sign_url("generations/gen_a/1/video.mp4", ttl_s=-5).url
    assert httpx.get(expired).status_code == 403
    parts = urlsplit(good)
    query = parse_qs(parts.query)
    sig, expires = query["sig"][0], query["expires"][0]
    flipped = sig[:-1] + ("0" if sig[-1] != "0" else "1")
    assert httpx.get(f"{api['base']}{parts.path}?expires={expires}&sig={flipped}").status_code == 403
    later = int(expires) + 3600  # a longer life with the old signature
    assert httpx.get(f"{api['base']}{parts.path}?expires={later}&sig={sig}").status_code == 403
    other = parts.path.replace("gen_a", "gen_b")  # another object with this URL's signature
    assert httpx.get(f"{api['base']}{other}?expires={expires}&sig={sig}").status_code == 403
    assert httpx.get(f"{api['base']}{parts.path}").status_code == 403  # unsigned


@pytest.mark.parametrize(
    "target",
    [
        "/v1/artifacts/../keys.db",
        "/v1/artifacts/%2e%2e/keys.db",
        "/v1/artifacts/%2E%2E/%2E%2E/etc/passwd",
        "/v1/artifacts/generations/..%2f..%2f..%2fkeys.db",
        "/v1/artifacts/generations%2f..%2f..%2fkeys.db",
        "/v1/artifacts//etc/passwd",
        "/v1/artifacts/..%5c..%5ckeys.db",
    ],
)
def test_path_traversal_is_refused_over_http(api: dict[str, Any], target: str) -> None:
    store = api["store"]
    key = target.removeprefix("/v1/artifacts/")
    for signed in (False, True):
        path = target
        if signed:  # even with a valid signature for the literal key
            expires = int(time.time()) + 60
            path = f"{target}?expires={expires}&sig={store.signature(key, expires)}"
        status, reply = raw_get(api["base"], path)
        assert status in (400, 403, 404), (target, status)
        assert b"SQLite format" not in reply and b"root:" not in reply


def test_models_need_no_key_and_leak_nothing(api: dict[str, Any]) -> None:
    response = httpx.get(f"{api['base']}/v1/models")
    assert response.status_code == 200
    text = response.text
    catalog = load_catalog()
    forbidden = [str(api["data"]), "127.0.0.1", "redis://", "http://", SECRET, "pipelines.", "adapter", "/home", "/tmp"]
    models = catalog.models.values() if isinstance(catalog.models, dict) else catalog.models
    forbidden += [m.weights for m in models if "/" in m.weights]  # hub ids and paths
    for needle in forbidden:
        assert needle not in text, needle


def test_info_log_holds_no_key_prompt_or_signed_query(api: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {api['token']}"}
    created = httpx.post(f"{api['base']}/v1/generations", json=create_body(prompt=PROMPT), headers=headers)
    assert created.status_code == 202, created.text
    gid = created.json()["id"]
    assert httpx.get(f"{api['base']}/v1/generations/{gid}", headers=headers).status_code == 200
    assert httpx.get(f"{api['base']}/v1/generations", headers={"Authorization": "Bearer gw_wrong"}).status_code == 401
    put_object(api, "generations/gen_log/1/video.mp4", b"L" * 10)
    url = api["store"].sign_url("generations/gen_log/1/video.mp4").url
    assert httpx.get(url).status_code == 200
    sig = parse_qs(urlsplit(url).query)["sig"][0]
    time.sleep(0.5)
    text = api["log"].read_text(errors="replace")
    assert "GET /v1/artifacts/generations/gen_log/1/video.mp4" in text  # access lines are logged, query-less
    for needle in (api["token"], api["other"], PROMPT, sig, "expires=", "gw_wrong"):
        assert needle not in text, f"{needle!r} in the API log"

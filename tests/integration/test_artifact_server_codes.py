"""The local artifact server behind real uvicorn: which code a refused signed URL answers (not the API
key's ``unauthenticated``), and Starlette's ``FileResponse`` conditional ranges (``If-Range``) under
the project's own RFC 9110 range rules."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.integration.test_stores import (
    LocalServer,
    local_server,  # noqa: F401  (the module-scoped server)
)


def _stored(server: LocalServer, tmp_path: Path, key: str, body: bytes) -> str:
    source = tmp_path / "body.bin"
    source.write_bytes(body)
    store = server.store()
    store.put_file(key, source, content_type="video/mp4")
    return store.sign_url(key).url


def test_tampered_and_expired_urls_answer_403_invalid_request(local_server: LocalServer, tmp_path: Path) -> None:  # noqa: F811
    key = "generations/codes/1-a/video.mp4"
    url = _stored(local_server, tmp_path, key, b"x" * 100)
    assert httpx.get(url).status_code == 200
    tampered = url.replace("sig=", "sig=0")
    bare = url.split("?")[0]
    # Signed with the server's own secret, correctly, for a time already past: refused for its age alone.
    past = int(time.time()) - 5
    expired = f"{bare}?expires={past}&sig={local_server.store().signature(key, past)}"
    for refused in (tampered, expired, f"{bare}?expires=1&sig=00", bare):
        r = httpx.get(refused)
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["param"] == "sig"


def test_if_range_with_the_current_etag_gets_the_range_and_a_stale_one_the_whole_file(
    local_server: LocalServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    body = bytes(range(256)) * 4
    url = _stored(local_server, tmp_path, "generations/codes/1-b/video.mp4", body)
    whole = httpx.get(url)
    etag = whole.headers["etag"]
    assert whole.content == body and whole.headers["accept-ranges"] == "bytes"
    part = httpx.get(url, headers={"Range": "bytes=10-19", "If-Range": etag})
    assert part.status_code == 206 and part.content == body[10:20]
    assert part.headers["content-range"] == f"bytes 10-19/{len(body)}"
    stale = httpx.get(url, headers={"Range": "bytes=10-19", "If-Range": '"not-this-one"'})
    assert stale.status_code == 200 and stale.content == body

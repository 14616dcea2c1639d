"""Inputs that used to end in a 500 now get a coded 4xx (or the RFC's answer), on real servers:

- a malformed list cursor (``?cursor=nan:x`` and friends) on the Redis backend: 400 ``invalid_parameter``;
- a malformed ``Range`` on the local artifact server (non-ASCII digits, a 5,000-digit number, junk):
  ignored as RFC 9110 says, so 200 with the whole file; a well-formed range selecting nothing: 416;
- a key for a project name the Redis key scheme cannot hold: refused at creation, by both key stores
  and by ``genworker keys create`` (exit 2, a message naming the allowed characters), so no key can
  exist that would fail every create later. A name at the edge of the scheme works end to end.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from api.api_keys import RedisKeyStore, Scope, SqliteKeyStore
from api.errors import InvalidProject
from tests.e2e.conftest import Stack, add_keys, assert_error, create_body, start_stack

READ_WRITE = [Scope.generations_read, Scope.generations_write]


@pytest.fixture
def redis_stack(tmp_path: Path, redis_url: str) -> Iterator[Stack]:
    s = start_stack(tmp_path / "api", redis_url=redis_url)
    add_keys(s)
    yield s
    s.stop()


# ------------------------------------------------------------------------------------------ cursor


@pytest.mark.parametrize(
    "cursor",
    ["nan:x", "NaN:gen_1", "inf:gen_1", "-inf:x", "1e999:x", "abc:x", "١٢٣:x", "1_000:x", "12345", ":x"],
)
def test_a_malformed_list_cursor_on_redis_is_a_400(redis_stack: Stack, cursor: str) -> None:
    with redis_stack.client("alpha") as c:
        assert c.post("/v1/generations", json=create_body()).status_code == 202
        response = c.get("/v1/generations", params={"cursor": cursor})
    assert_error(response, 400, "invalid_parameter", "cursor")


def test_a_cursor_the_list_handed_out_still_pages_on_redis(redis_stack: Stack) -> None:
    with redis_stack.client("alpha") as c:
        made = [c.post("/v1/generations", json=create_body()).json()["id"] for _ in range(3)]
        first = c.get("/v1/generations", params={"limit": 2}).json()
        second = c.get("/v1/generations", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    seen = [g["id"] for g in first["data"] + second["data"]]
    assert sorted(seen) == sorted(made) and len(set(seen)) == 3
    assert second["next_cursor"] is None


# ------------------------------------------------------------------------------------------- range

BODY = bytes(range(256)) * 40  # 10,240 bytes


@pytest.fixture
def signed_url(fresh_stack: Stack, tmp_path: Path) -> tuple[Stack, str]:
    path = tmp_path / "clip.mp4"
    path.write_bytes(BODY)
    key = "generations/gen_range/1-0123456789ab/video.mp4"
    fresh_stack.store.put_file(key, path, content_type="video/mp4", sha256=hashlib.sha256(BODY).hexdigest())
    return fresh_stack, fresh_stack.store.sign_url(key).url


@pytest.mark.parametrize(
    "header",
    [
        "bytes=٣-".encode(),  # ARABIC-INDIC DIGIT THREE, as UTF-8
        "bytes=0-٣".encode(),
        b"bytes=\xb2-",  # '²' in Latin-1: str.isdigit() says yes, int() says no
        b"bytes=\xb9-\xb3",
        b"bytes=-\xb2",
        b"bytes=0x10-",
        b"bytes=+5-9",
        b"bytes=5-3",  # last before first: invalid, ignored
        b"bytes=-",
        b"bytes",
        b"pages=0-5",
        b"bytes=0-1,5-6",  # several ranges: we may send it all
    ],
)
def test_a_malformed_range_is_ignored_and_the_whole_file_sent(signed_url: tuple[Stack, str], header: bytes) -> None:
    _, url = signed_url
    response = httpx.get(url, headers=[(b"Range", header)])
    assert response.status_code == 200, response.text
    assert response.content == BODY
    assert "content-range" not in response.headers


@pytest.mark.parametrize("header", [b"bytes=" + b"9" * 5000 + b"-", b"bytes=10240-", b"bytes=-0"])
def test_a_well_formed_range_that_selects_nothing_is_a_416(signed_url: tuple[Stack, str], header: bytes) -> None:
    _, url = signed_url
    response = httpx.get(url, headers=[(b"Range", header)])
    assert_error(response, 416, "invalid_request", "Range")
    assert response.headers["content-range"] == f"bytes */{len(BODY)}"


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        (b"bytes=0-" + b"9" * 5000, 0, len(BODY) - 1),
        (b"bytes=00010-00019", 10, 19),
        (b"bytes=-16", len(BODY) - 16, len(BODY) - 1),
    ],
)
def test_well_formed_ranges_still_get_206(signed_url: tuple[Stack, str], header: bytes, start: int, end: int) -> None:
    _, url = signed_url
    response = httpx.get(url, headers=[(b"Range", header)])
    assert response.status_code == 206, response.text
    assert response.headers["content-range"] == f"bytes {start}-{end}/{len(BODY)}"
    assert response.content == BODY[start : end + 1]


# ----------------------------------------------------------------------------------- project names

BAD_PROJECTS = ["acme corp", "", "ünïcode", "a{b}", "line\nbreak\n", "x" * 201, "semi;colon"]


@pytest.mark.parametrize("project", BAD_PROJECTS)
def test_key_stores_refuse_a_project_name_the_queue_cannot_hold(project: str, redis_url: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    redis_keys = RedisKeyStore(client)
    sqlite_keys = SqliteKeyStore(tmp_path / "keys.db")
    try:
        for store in (redis_keys, sqlite_keys):
            with pytest.raises(InvalidProject, match="allowed"):
                store.create(project, READ_WRITE)
            assert store.list_keys() == []  # nothing half-written
        assert client.keys("*") == []
    finally:
        redis_keys.close()
        sqlite_keys.close()


def genworker(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "genworker.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_keys_create_cli_refuses_a_bad_project_name_with_a_clear_error(redis_url: str) -> None:
    made = genworker(
        "keys", "create", "--project", "acme corp", "--scope", "generations:read", "--redis-url", redis_url
    )
    assert made.returncode == 2, made.stderr  # a usage error, not a traceback
    assert "Traceback" not in made.stderr
    assert "--project" in made.stderr and "allowed" in made.stderr, made.stderr
    assert made.stdout == ""
    assert redis.Redis.from_url(redis_url).keys("*") == []


def test_a_project_name_at_the_edge_of_the_key_scheme_works_end_to_end(redis_stack: Stack) -> None:
    project = "team.a+b@x/y=z:1-2_3"
    made = genworker(
        "keys",
        "create",
        "--project",
        project,
        "--scope",
        "generations:read",
        "--scope",
        "generations:write",
        "--data-dir",
        redis_stack.settings.data_dir,
    )  # fmt: skip  (the stack's key store; its queue is on Redis)
    assert made.returncode == 0, made.stderr
    headers = {"Authorization": f"Bearer {made.stdout.strip()}"}
    with httpx.Client(base_url=redis_stack.base_url, headers=headers, timeout=30) as c:
        created = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": "k1"})
        assert created.status_code == 202, created.text
        listed = c.get("/v1/generations")
    assert listed.status_code == 200, listed.text
    assert [g["id"] for g in listed.json()["data"]] == [created.json()["id"]]

"""``GET /v1/generations/{id}/events`` at its edges, on both queue backends, without a worker (the test writes
what a worker would, through the real queue):

- a ``Last-Event-ID`` this stream never sent, or one this backend cannot read, is a coded 400 before the
  stream starts, never a 200 whose stream then breaks with a server traceback;
- an open stream ends within a few seconds of its key's revocation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api.api_keys import Scope
from tests.e2e.conftest import Stack, add_keys, assert_error, create_body, start_stack
from tests.integration.worker_harness import redis_db_url

EVENTS_API: dict[str, Any] = {"events_poll_s": 0.05, "events_heartbeat_s": 0.3, "unhosted_models": "accept"}
REDIS_DB = 10
REVOKED_WITHIN_S = 5.0  # the key cache's second, the stream's recheck every 2 s, and room for a busy machine
READ = Scope.generations_read


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory, redis_server: Any) -> Iterator[dict[str, Stack]]:
    tmp = tmp_path_factory.mktemp("events-edges")
    made = {
        "sqlite": start_stack(tmp / "sqlite", api=EVENTS_API),
        "redis": start_stack(tmp / "redis", api=EVENTS_API, redis_url=redis_db_url(redis_server, REDIS_DB)),
    }
    try:
        for stack in made.values():
            add_keys(stack)
        yield made
    finally:
        for stack in made.values():
            stack.stop()


@pytest.fixture(params=["sqlite", "redis"])
def stack(request: pytest.FixtureRequest, stacks: dict[str, Stack]) -> Stack:
    return stacks[request.param]


def _queued(stack: Stack, token: str = "alpha") -> str:
    with stack.client(token) as c:
        made = c.post("/v1/generations", json=create_body("tiny-ltx2"))
    assert made.status_code == 202, made.text
    return str(made.json()["id"])


BOTH = frozenset({"sqlite", "redis"})


@pytest.mark.parametrize(
    ("last_event_id", "refused_on"),
    [
        ("x;y", BOTH),  # not an id at all
        ("1-0/tiny-ltx2,", {"sqlite"}),  # a Redis event id: SQLite's reads fail on it
        ("5,1700000000000-0", {"sqlite"}),  # a SQLite event id beside a Redis note id
        ("1/tiny-wan,", {"sqlite"}),
        ("99999999999999999999,", BOTH),  # past SQLite's integers and Redis' 64-bit stream ids
        (",99999999999999999999-99999999999999999999", BOTH),  # past Redis' 64-bit stream ids
        ("18446744073709551616-0/tiny-ltx2,", BOTH),  # one past Redis' largest stream id
    ],
)
def test_a_last_event_id_this_stream_cannot_resume_from_is_a_400_before_it_starts(
    stack: Stack, last_event_id: str, refused_on: frozenset[str]
) -> None:
    generation_id = _queued(stack)
    status, body = _first_bytes(stack, generation_id, last_event_id)
    if stack.settings.queue.backend not in refused_on:  # an id this backend writes: the stream runs
        assert status == 200 and b"event: status" in body, body
        return
    assert status == 400, body
    error = httpx.Response(400, content=body).json()["error"]
    assert (error["code"], error["param"]) == ("invalid_parameter", "Last-Event-ID")


def test_an_open_stream_ends_within_seconds_of_its_keys_revocation(stack: Stack) -> None:
    record, token = stack.keys.create("alpha", [READ])
    generation_id = _queued(stack)  # stays queued: its stream never ends by itself
    headers = {"Authorization": f"Bearer {token}"}
    revoked_at = None
    with (
        httpx.Client(base_url=stack.base_url, timeout=15) as c,
        c.stream("GET", f"/v1/generations/{generation_id}/events", headers=headers) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():  # heartbeats every 0.3 s: the loop wakes often
            if revoked_at is None and line.startswith(": stream open"):
                assert stack.keys.revoke(record.id)
                revoked_at = time.monotonic()
            assert revoked_at is None or time.monotonic() - revoked_at < 3 * REVOKED_WITHIN_S, "still open"
    assert revoked_at is not None
    assert time.monotonic() - revoked_at <= REVOKED_WITHIN_S
    with httpx.Client(base_url=stack.base_url) as c:  # and it cannot be opened again
        assert_error(c.get(f"/v1/generations/{generation_id}/events", headers=headers), 401, "unauthenticated")


def _first_bytes(stack: Stack, generation_id: str, last_event_id: str) -> tuple[int, bytes]:
    """The status and the start of the answer: a 400's whole body, or a stream's first message."""
    headers = {"Authorization": f"Bearer {stack.tokens['alpha']}", "Last-Event-ID": last_event_id}
    body = b""
    with (
        httpx.Client(base_url=stack.base_url, timeout=15) as c,
        c.stream("GET", f"/v1/generations/{generation_id}/events", headers=headers) as response,
    ):
        for chunk in response.iter_bytes():
            body += chunk
            if response.status_code == 200 and b"event: " in body and body.endswith(b"\n\n"):
                break
        return response.status_code, body

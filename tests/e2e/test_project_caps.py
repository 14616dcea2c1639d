"""A project's ``max_queued`` as a client meets it: 429 ``queue_full`` with ``Retry-After``, nothing
enqueued, and the same create (same Idempotency-Key) accepted once room frees up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from foundation.core.errors import ErrorCode, public_message
from tests.e2e.conftest import Stack, add_keys, assert_error, create_body, start_stack


@pytest.fixture
def capped_stack(tmp_path: Path) -> Iterator[Stack]:
    s = start_stack(tmp_path / "api", queue_settings={"fair": {"projects": {"alpha": {"max_queued": 2}}}})
    add_keys(s)
    yield s
    s.stop()


def test_a_create_over_max_queued_is_429_and_accepted_once_room_frees(capped_stack: Stack) -> None:
    key = f"late-{uuid.uuid4()}"
    with capped_stack.client("alpha") as c, capped_stack.client("beta") as other:
        first, second = (c.post("/v1/generations", json=create_body()) for _ in range(2))
        assert first.status_code == second.status_code == 202
        refused = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
        error = assert_error(refused, 429, "queue_full")
        assert error["message"] == public_message(ErrorCode.queue_full)
        assert int(refused.headers["Retry-After"]) > 0
        listed = c.get("/v1/generations").json()["data"]
        assert {g["id"] for g in listed} == {first.json()["id"], second.json()["id"]}  # nothing enqueued
        # Another project has room of its own.
        assert other.post("/v1/generations", json=create_body()).status_code == 202

        assert c.post(f"/v1/generations/{first.json()['id']}/cancel").status_code == 200
        accepted = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
        again = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
    assert accepted.status_code == 202 and "Idempotent-Replayed" not in accepted.headers
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == accepted.json()["id"]

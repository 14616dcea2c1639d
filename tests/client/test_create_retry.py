"""Creates that survive a lost answer: one Idempotency-Key per logical generation, reused on retry."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from genworker_client import ApiError, AsyncClient, Client, Generation, RetryPolicy
from tests.client.conftest import NEVER_RUNS_MODEL, Server
from tests.client.proxy import DroppingProxy
from tests.client.recording import RecordingTransport

QUICK_RETRY = RetryPolicy(max_attempts=4, base_s=0.05, cap_s=0.2)


def unique_prompt(label: str) -> str:
    return f"{label} {uuid.uuid4().hex}"


def generations_with_prompt(server: Server, prompt: str) -> list[Generation]:
    """Every generation of the dev key's project whose prompt is ``prompt``, read from the server."""
    found: list[Generation] = []
    with server.client() as client:
        cursor: str | None = None
        while True:
            page = client.list(limit=100, cursor=cursor)
            found += [g for g in page.data if g.input.get("prompt") == prompt]
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor


@pytest.fixture
def drop_first_create(server: Server) -> Iterator[DroppingProxy]:
    proxy = DroppingProxy(server.port, drop=lambda method, path: method == "POST" and path == "/v1/generations")
    yield proxy
    proxy.close()


def test_lost_create_answer_is_retried_into_exactly_one_generation(
    server: Server, drop_first_create: DroppingProxy
) -> None:
    prompt = unique_prompt("lost answer")
    seen_ids: list[str] = []
    with (
        server.client(retry=QUICK_RETRY) as direct,
        Client(drop_first_create.base_url, server.api_key, retry=QUICK_RETRY) as client,
    ):
        generation = client.create(NEVER_RUNS_MODEL, prompt, on_created=lambda g: seen_ids.append(g.id))
        posts = [r for r in drop_first_create.requests if r.method == "POST"]
        # The server answered the first POST; the client never saw that answer and sent it again.
        assert [r.dropped for r in posts] == [True, False]
        assert {r.headers["idempotency-key"] for r in posts} == {generation.idempotency_key}
        assert generation.replayed, "the second POST should be answered by replaying the first"
        assert seen_ids == [generation.id]
        assert generation.status == "queued"
        assert generation.price_hold is not None and generation.price_hold.currency == "USD"
        assert [g.id for g in generations_with_prompt(server, prompt)] == [generation.id]
        assert direct.cancel(generation.id).status == "canceled"


def test_async_client_retries_a_lost_create_the_same_way(server: Server, drop_first_create: DroppingProxy) -> None:
    prompt = unique_prompt("async lost answer")

    async def scenario() -> Generation:
        async with AsyncClient(drop_first_create.base_url, server.api_key, retry=QUICK_RETRY) as client:
            created = await client.create(NEVER_RUNS_MODEL, prompt)
            await client.cancel(created.id)
            return created

    generation = asyncio.run(scenario())
    posts = [r for r in drop_first_create.requests if (r.method, r.path) == ("POST", "/v1/generations")]
    assert [r.dropped for r in posts] == [True, False]
    assert {r.headers["idempotency-key"] for r in posts} == {generation.idempotency_key}
    assert generation.replayed
    assert [g.id for g in generations_with_prompt(server, prompt)] == [generation.id]


def test_without_the_key_a_lost_answer_would_have_made_two(server: Server) -> None:
    """The control for the test above: two creates with different keys really do make two generations,
    so "exactly one" there is the key's doing, not a server that merges equal bodies."""
    prompt = unique_prompt("control")
    with server.client() as client:
        first = client.create(NEVER_RUNS_MODEL, prompt)
        second = client.create(NEVER_RUNS_MODEL, prompt)
        assert first.id != second.id
        assert sorted(g.id for g in generations_with_prompt(server, prompt)) == sorted([first.id, second.id])
        for g in (first, second):
            client.cancel(g.id)


def test_a_caller_supplied_key_is_used_and_a_different_body_conflicts(server: Server) -> None:
    key = f"caller-key-{uuid.uuid4().hex}"
    prompt = unique_prompt("own key")
    transport = RecordingTransport()
    with server.client(transport=transport) as client:
        first = client.create(NEVER_RUNS_MODEL, prompt, idempotency_key=key)
        again = client.create(NEVER_RUNS_MODEL, prompt, idempotency_key=key)
        assert (again.id, again.replayed, first.replayed) == (first.id, True, False)
        assert [e.headers["idempotency-key"] for e in transport.to("/generations")] == [key, key]
        with pytest.raises(ApiError) as caught:
            client.create(NEVER_RUNS_MODEL, prompt + " changed", idempotency_key=key)
        client.cancel(first.id)
    error = caught.value
    assert (error.status, error.code, error.param, error.attempts) == (
        409,
        "idempotency_conflict",
        "Idempotency-Key",
        1,
    )
    assert error.message


def test_the_ledger_keeps_a_logical_generation_across_processes(server: Server, tmp_path: Path) -> None:
    ledger = tmp_path / "keys.json"
    prompt = unique_prompt("ledger")
    with server.client(ledger=ledger) as client:
        first = client.create(NEVER_RUNS_MODEL, prompt, name="clip")
    # A "restarted process": a new client on the same ledger file, same logical name and request.
    transport = RecordingTransport()
    with server.client(ledger=ledger, transport=transport) as client:
        again = client.create(NEVER_RUNS_MODEL, prompt, name="clip")
        other = client.create(NEVER_RUNS_MODEL, prompt, name="another clip")
        client.cancel(first.id)
        client.cancel(other.id)
    assert (again.id, again.idempotency_key, again.replayed) == (first.id, first.idempotency_key, True)
    # The known generation was read back, not created again: one POST (the other name), one GET.
    assert [(e.method, e.url.path) for e in transport.exchanges[:3]] == [
        ("GET", f"/v1/generations/{first.id}"),
        ("POST", "/v1/generations"),
        ("POST", f"/v1/generations/{first.id}/cancel"),
    ]
    assert other.id != first.id
    assert sorted(g.id for g in generations_with_prompt(server, prompt)) == sorted([first.id, other.id])


def test_cancel_whose_answer_was_lost_still_returns_the_canceled_record(server: Server) -> None:
    with server.client() as client:
        generation = client.create(NEVER_RUNS_MODEL, unique_prompt("cancel"))
    proxy = DroppingProxy(server.port, drop=lambda method, path: method == "POST" and path.endswith("/cancel"))
    try:
        with server.client() as direct, Client(proxy.base_url, server.api_key, retry=QUICK_RETRY) as client:
            canceled = client.cancel(generation.id)
            assert canceled.status == "canceled"
            assert [r.dropped for r in proxy.requests if r.path.endswith("/cancel")] == [True, False]
            # Without a lost answer, canceling a terminal generation is the server's 409.
            with pytest.raises(ApiError) as caught:
                direct.cancel(generation.id)
            assert (caught.value.status, caught.value.code, caught.value.attempts) == (409, "not_cancelable", 1)
    finally:
        proxy.close()

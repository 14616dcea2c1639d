"""Create with an Idempotency-Key, retry it, conflict on a different body, race one key from many
threads; list and cancel. All over HTTP against a live server."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

from tests.e2e.conftest import Stack, assert_error, create_body


def test_create_returns_queued_with_price_hold(stack: Stack) -> None:
    with stack.client("alpha") as c:
        r = c.post("/v1/generations", json=create_body(duration_seconds=2), headers={"Idempotency-Key": "k-create"})
    assert r.status_code == 202, r.text
    g = r.json()
    assert g["id"].startswith("gen_")
    assert g["status"] == "queued"
    assert g["price_hold"] == {"currency": "USD", "amount": "0.02"}  # 2 s x 0.01 USD/s at 144p
    assert g["artifacts"] == []
    assert isinstance(g["parameters"]["seed"], int)  # drawn now so retries of the job reproduce it
    assert r.headers["Location"] == f"/v1/generations/{g['id']}"
    assert r.headers["Retry-After"] == "1"  # FAST_POLLING.poll_first_s
    assert "Idempotent-Replayed" not in r.headers
    assert "project" not in g


def test_retry_with_same_key_replays_the_same_generation(stack: Stack) -> None:
    key = f"order-{uuid.uuid4()}"
    with stack.client("alpha") as c:
        first = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
        again = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["parameters"]["seed"] == first.json()["parameters"]["seed"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers


def test_same_key_with_a_different_body_is_a_conflict(stack: Stack) -> None:
    key = f"order-{uuid.uuid4()}"
    with stack.client("alpha") as c:
        assert c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key}).status_code == 202
        r = c.post("/v1/generations", json=create_body(prompt="another prompt"), headers={"Idempotency-Key": key})
    assert_error(r, 409, "idempotency_conflict", "Idempotency-Key")


def test_idempotency_keys_are_scoped_to_the_project(stack: Stack) -> None:
    key = f"shared-{uuid.uuid4()}"
    with stack.client("alpha") as a, stack.client("beta") as b:
        ra = a.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
        rb = b.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
    assert ra.status_code == rb.status_code == 202
    assert ra.json()["id"] != rb.json()["id"]
    assert "Idempotent-Replayed" not in rb.headers


def test_without_a_key_every_create_is_new(stack: Stack) -> None:
    with stack.client("alpha") as c:
        ids = {c.post("/v1/generations", json=create_body()).json()["id"] for _ in range(2)}
    assert len(ids) == 2


def test_concurrent_creates_with_one_key_make_one_generation(fresh_stack: Stack) -> None:
    key = f"race-{uuid.uuid4()}"

    def create(_: int) -> tuple[int, str, bool]:
        with fresh_stack.client("alpha") as c:
            r = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
            return r.status_code, r.json()["id"], r.headers.get("Idempotent-Replayed") == "true"

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(create, range(16)))
    assert {status for status, _, _ in results} == {202}
    assert len({gid for _, gid, _ in results}) == 1
    assert sum(1 for _, _, replayed in results if not replayed) == 1
    with fresh_stack.client("alpha") as c:
        listed = c.get("/v1/generations", params={"limit": 100}).json()
    assert [g["id"] for g in listed["data"]] == [results[0][1]]


def test_list_is_newest_first_with_cursor_paging_and_own_project_only(fresh_stack: Stack) -> None:
    with fresh_stack.client("alpha") as a, fresh_stack.client("beta") as b:
        created = [a.post("/v1/generations", json=create_body(prompt=f"p{i}")).json()["id"] for i in range(5)]
        b.post("/v1/generations", json=create_body())
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, str | int] = {"limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = a.get("/v1/generations", params=params)
            assert page.status_code == 200, page.text
            body = page.json()
            assert len(body["data"]) <= 2
            seen += [g["id"] for g in body["data"]]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
    assert seen == list(reversed(created))
    assert pages == 3


def test_cancel_a_queued_generation_then_cancel_again_is_409(stack: Stack) -> None:
    with stack.client("alpha") as c:
        gid = c.post("/v1/generations", json=create_body()).json()["id"]
        r = c.post(f"/v1/generations/{gid}/cancel")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "canceled"
        assert "Retry-After" not in r.headers
        assert c.get(f"/v1/generations/{gid}").json()["status"] == "canceled"
        assert_error(c.post(f"/v1/generations/{gid}/cancel"), 409, "not_cancelable")

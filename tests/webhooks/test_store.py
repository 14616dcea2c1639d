"""The ``WebhookStore`` contract, run against both real backends (SQLite file, redis-server)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from api.webhooks.models import (
    Delivery,
    DeliveryState,
    Endpoint,
    EventType,
    ProjectSecret,
    RequestWebhook,
    delivery_id,
)
from api.webhooks.redis_store import RedisWebhookStore
from api.webhooks.store import SqliteWebhookStore, WebhookStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WebhookStore]:
    if request.param == "sqlite":
        s: WebhookStore = SqliteWebhookStore(tmp_path / "webhooks.db")
    else:
        s = RedisWebhookStore.from_url(request.getfixturevalue("redis_url"))
    yield s
    s.close()


def endpoint(eid: str = "wh_1", project: str = "alpha", at: datetime = T0) -> Endpoint:
    return Endpoint(
        id=eid,
        project=project,
        url="https://example.com/hook",
        events=list(EventType),
        sealed_secret="x",
        created_at=at,
    )


def delivery(eid: str = "wh_1", job: str = "gen_1", at: datetime = T0, project: str = "alpha") -> Delivery:
    kind = EventType.generation_succeeded
    return Delivery(
        id=delivery_id(eid, job, kind),
        endpoint_id=eid,
        project=project,
        event_type=kind,
        generation_id=job,
        body="{}",
        created_at=at,
        next_attempt_at=at,
    )


def test_endpoints_round_trip(store: WebhookStore) -> None:
    assert store.add_endpoint(endpoint("wh_1"), max_per_project=20)
    assert store.add_endpoint(endpoint("wh_2", project="beta", at=T0 + timedelta(seconds=1)), max_per_project=20)
    assert [e.id for e in store.list_endpoints()] == ["wh_1", "wh_2"]
    assert [e.id for e in store.list_endpoints("beta")] == ["wh_2"]
    disabled = endpoint("wh_1").model_copy(update={"disabled_at": T0, "disabled_reason": "r"})
    store.save_endpoint(disabled)
    got = store.get_endpoint("wh_1")
    assert got is not None and not got.active and got.disabled_reason == "r"
    assert store.remove_endpoint("wh_1") and not store.remove_endpoint("wh_1")
    assert store.get_endpoint("wh_1") is None


def test_delivery_is_added_once_and_claimed_once(store: WebhookStore) -> None:
    d = delivery()
    assert store.add_delivery(d)
    assert not store.add_delivery(d.model_copy(update={"body": "other"}))  # same derived id: no second one
    stored = store.get_delivery(d.id)
    assert stored is not None and stored.body == "{}"
    assert store.claim_due(T0 - timedelta(seconds=1), lease_s=10, limit=10) == []  # not due yet
    claimed = store.claim_due(T0, lease_s=10, limit=10)
    assert [c.id for c in claimed] == [d.id]
    # Leased: no other sender gets it until the lease ends, then it is due again (a killed sender).
    assert store.claim_due(T0 + timedelta(seconds=5), lease_s=10, limit=10) == []
    assert [c.id for c in store.claim_due(T0 + timedelta(seconds=11), lease_s=10, limit=10)] == [d.id]


def test_saved_states_drive_the_schedule(store: WebhookStore) -> None:
    d = delivery()
    store.add_delivery(d)
    later = T0 + timedelta(seconds=30)
    store.save_delivery(d.model_copy(update={"attempt_count": 1, "next_attempt_at": later}))
    assert store.claim_due(later - timedelta(seconds=1), lease_s=1, limit=5) == []
    assert [c.attempt_count for c in store.claim_due(later, lease_s=1, limit=5)] == [1]
    store.save_delivery(d.model_copy(update={"state": DeliveryState.delivered, "next_attempt_at": None}))
    assert store.claim_due(later + timedelta(days=1), lease_s=1, limit=5) == []
    got = store.get_delivery(d.id)
    assert got is not None and got.state is DeliveryState.delivered


def test_claims_are_fair_by_project(store: WebhookStore) -> None:
    """A project's older backlog takes at most its share of a claim, and none when the sender says it is full;
    a deferred one is due again in its project's order (issue 47)."""
    backlog = [delivery("wh_a", f"gen_a{i}", T0 + timedelta(milliseconds=i), "mallory") for i in range(10)]
    late = [delivery("wh_b", f"gen_b{i}", T0 + timedelta(seconds=1, milliseconds=i), "alice") for i in range(2)]
    for d in [*backlog, *late]:
        store.add_delivery(d)
    now = T0 + timedelta(seconds=2)
    claimed = store.claim_due(now, lease_s=10, limit=6, per_project=3)
    assert [c.id for c in claimed] == [d.id for d in backlog[:3] + late]  # oldest head first, 3 at most each
    store.defer(claimed, now)  # handed back: due again at once, behind their project's older ones
    assert {c.id for c in store.claim_due(now, lease_s=10, limit=6, skip={"mallory"})} == {d.id for d in late}
    rest = [c.id for c in store.claim_due(now, lease_s=10, limit=20)]
    assert rest[:7] == [d.id for d in backlog[3:]] and set(rest[7:]) == {d.id for d in backlog[:3]}  # ties: any order
    assert store.claim_due(now, lease_s=10, limit=20) == []  # every one leased


def test_log_is_newest_first_and_removed_with_its_endpoint(store: WebhookStore) -> None:
    assert store.add_endpoint(endpoint(), max_per_project=20)
    for i in range(3):
        store.add_delivery(delivery(job=f"gen_{i}", at=T0 + timedelta(seconds=i)))
    assert [d.generation_id for d in store.list_deliveries("wh_1")] == ["gen_2", "gen_1", "gen_0"]
    assert [d.generation_id for d in store.list_deliveries("wh_1", limit=1)] == ["gen_2"]
    store.remove_endpoint("wh_1")
    assert store.list_deliveries("wh_1") == []
    assert store.claim_due(T0 + timedelta(days=1), lease_s=1, limit=10) == []


def test_cursor(store: WebhookStore) -> None:
    assert store.cursor() is None
    store.set_cursor("17")
    store.set_cursor("18")
    assert store.cursor() == "18"


def test_request_webhooks_origins_and_project_secrets(store: WebhookStore) -> None:
    hook = RequestWebhook(
        generation_id="gen_1", project="alpha", url="https://example.com/h", events=list(EventType), created_at=T0
    )
    assert store.get_request_webhook("gen_1") is None
    store.add_request_webhook(hook)
    assert store.get_request_webhook("gen_1") == hook

    origin = endpoint("rq_1").model_copy(update={"consecutive_failures": 2, "failing_since": T0})
    assert store.get_origin("rq_1") is None
    store.save_origin(origin)
    assert store.get_origin("rq_1") == origin
    assert store.get_endpoint("rq_1") is None and store.list_endpoints() == []  # not a registered endpoint

    first = ProjectSecret(project="alpha", sealed_secret="s1", created_at=T0)
    assert store.add_project_secret(first)
    assert not store.add_project_secret(first.model_copy(update={"sealed_secret": "s2"}))  # the first one stays
    assert store.get_project_secret("alpha") == first
    rotated = first.model_copy(update={"sealed_secret": "s3", "previous_sealed": "s1", "previous_until": T0})
    store.save_project_secret(rotated)
    store.add_project_secret(ProjectSecret(project="beta", sealed_secret="b", created_at=T0))
    assert [(s.project, s.sealed_secret) for s in store.list_project_secrets()] == [("alpha", "s3"), ("beta", "b")]


def test_a_schedule_from_before_the_per_project_one_is_claimed(tmp_path: Path, redis_url: str) -> None:
    """Deliveries stored by the previous release (one due order for all projects) are claimed, and their
    next due time lands in their project's schedule (an upgrade loses none)."""
    old = [delivery(job="gen_old1"), delivery(job="gen_old2", at=T0 + timedelta(seconds=1))]
    redis_store = RedisWebhookStore.from_url(redis_url)
    for d in old:  # as the previous release wrote them
        redis_store.client.set(f"gw:webhooks:delivery:{d.id}", d.model_dump_json())
        redis_store.client.zadd("gw:webhooks:due", {d.id: int(d.created_at.timestamp() * 1000)})
    sqlite_path = tmp_path / "webhooks.db"
    with sqlite3.connect(sqlite_path) as conn:
        conn.execute(
            "CREATE TABLE webhook_deliveries (id TEXT PRIMARY KEY, endpoint_id TEXT NOT NULL, "
            "created_ms INTEGER NOT NULL, state TEXT NOT NULL, due_ms INTEGER, record TEXT NOT NULL)"
        )
        conn.executemany(
            "INSERT INTO webhook_deliveries VALUES (?, ?, ?, 'pending', ?, ?)",
            [
                (d.id, d.endpoint_id, ms, ms, d.model_dump_json())
                for d in old
                for ms in [int(d.created_at.timestamp() * 1000)]
            ],
        )
    for store in (redis_store, SqliteWebhookStore(sqlite_path)):
        claimed = store.claim_due(T0 + timedelta(seconds=5), lease_s=10, limit=10, skip={"other"})
        assert [c.id for c in claimed] == [d.id for d in old]
        retry = claimed[0].model_copy(update={"attempt_count": 1, "next_attempt_at": T0 + timedelta(seconds=20)})
        store.save_delivery(retry)
        store.defer(claimed[1:], T0 + timedelta(seconds=6))
        assert [c.id for c in store.claim_due(T0 + timedelta(seconds=6), lease_s=10, limit=10)] == [old[1].id]
        # Both in the project's schedule now: the lease of the one deferred (due at 16 s), then the retry.
        later = store.claim_due(T0 + timedelta(seconds=20), lease_s=10, limit=10, per_project=2, skip={"other"})
        assert [c.id for c in later] == [old[1].id, old[0].id]
        store.close()
    assert RedisWebhookStore.from_url(redis_url).client.zcard("gw:webhooks:due") == 0  # drained into alpha's

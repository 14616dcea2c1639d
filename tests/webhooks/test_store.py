"""The ``WebhookStore`` contract, run against both real backends (SQLite file, redis-server)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from api.webhooks.models import Delivery, DeliveryState, Endpoint, EventType, delivery_id
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


def delivery(eid: str = "wh_1", job: str = "gen_1", at: datetime = T0) -> Delivery:
    kind = EventType.generation_succeeded
    return Delivery(
        id=delivery_id(eid, job, kind),
        endpoint_id=eid,
        project="alpha",
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

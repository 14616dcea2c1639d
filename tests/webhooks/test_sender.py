"""The sender over real queues (SQLite, redis-server) and a real receiver on loopback: one logical
delivery per event per endpoint through 5xx answers, signatures the standard verifier accepts,
outbound refusals, redirects not followed, auto-disable and redelivery."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from api.webhooks.models import DeliveryState, Endpoint, EventType, delivery_id
from api.webhooks.sender import Sender, signed_headers
from api.webhooks.service import Webhooks, open_webhooks
from foundation.core.catalog import Catalog
from foundation.core.contract import Status
from foundation.queue.base import JobQueue
from foundation.queue.factory import open_queue
from foundation.settings import Settings
from genworker_client import InvalidWebhook, verify_webhook
from tests.webhooks.conftest import Receiver, hook_settings, run_job


@dataclass
class Env:
    settings: Settings
    queue: JobQueue
    hooks: Webhooks
    sender: Sender

    def drain(self, done: Callable[[], bool], timeout_s: float = 20.0) -> None:
        """Run sender rounds until ``done`` holds (fail after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, "sender did not finish in time"
            if not self.sender.run_once():
                time.sleep(0.05)


def make_env(tmp_path: Path, redis_url: str | None = None, **hooks: object) -> Env:
    settings = hook_settings(tmp_path, redis_url=redis_url, **hooks)
    queue = open_queue(settings.queue)
    service = open_webhooks(settings)
    sender = Sender(queue, service.store, service.sealer, service.transport, settings.webhooks)
    return Env(settings, queue, service, sender)


@pytest.fixture(params=["sqlite", "redis"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    e = make_env(tmp_path, redis_url)
    yield e
    e.sender.close()
    e.hooks.close()
    e.queue.close()


def states(env: Env, endpoint: Endpoint) -> list[DeliveryState]:
    return [d.state for d in env.hooks.store.list_deliveries(endpoint.id, 100)]


def test_one_logical_delivery_per_event_through_5xx(env: Env, receiver: Receiver, catalog: Catalog) -> None:
    everything, secret = env.hooks.add_endpoint("alpha", receiver.url)
    only_done, only_secret = env.hooks.add_endpoint("alpha", receiver.url + "?only", [EventType.generation_succeeded])
    env.hooks.add_endpoint("beta", receiver.url + "?beta")
    receiver.script = [500, 503, 500]  # the first three attempts fail, then the receiver recovers
    ok = run_job(env.queue, catalog, "alpha", Status.succeeded)
    failed = run_job(env.queue, catalog, "alpha", Status.failed)
    env.drain(lambda: len(states(env, everything)) == 4 and set(states(env, everything)) == {DeliveryState.delivered})
    env.drain(lambda: states(env, only_done) == [DeliveryState.delivered])

    expected = {
        (ok.id, "generation.running"),
        (ok.id, "generation.succeeded"),
        (failed.id, "generation.running"),
        (failed.id, "generation.failed"),
    }
    logical = {r.webhook_id: r for r in receiver.received if r.path == "/hook"}
    assert {(r.payload["data"]["id"], r.payload["type"]) for r in logical.values()} == expected
    assert len(logical) == 4
    assert len(receiver.received) == 4 + 1 + 3  # 4 + the filtered endpoint's one + the 3 refused attempts
    for r in receiver.received:  # a retry is the same delivery: same id, same bytes, fresh signature
        assert r.body == logical.get(r.webhook_id, r).body
        key = only_secret if r.path.endswith("?only") else secret
        assert Webhook(key).verify(r.body, r.headers)["type"] == r.payload["type"]
        assert r.path != "/hook?beta"  # another project's endpoint hears nothing
    assert all(
        r.webhook_id == delivery_id(everything.id, r.payload["data"]["id"], EventType(r.payload["type"]))
        for r in logical.values()
    )

    succeeded = next(r.payload for r in logical.values() if r.payload["type"] == "generation.succeeded")
    assert succeeded["data"]["artifacts"][0]["sha256"] == "0" * 64
    assert "key" not in succeeded["data"]["artifacts"][0] and "url" not in str(succeeded)
    failure = next(r.payload for r in logical.values() if r.payload["type"] == "generation.failed")
    assert failure["data"]["error"]["code"] == "pipeline_error"
    log = env.hooks.store.list_deliveries(everything.id) + env.hooks.store.list_deliveries(only_done.id)
    assert sum(d.attempt_count for d in log) == 5 + 3  # the refused attempts fell on either endpoint
    assert [a.status_code for a in max(log, key=lambda d: d.attempt_count).attempts][-1] == 200


def test_a_retry_long_after_creation_is_signed_at_its_attempt(env: Env, receiver: Receiver, catalog: Catalog) -> None:
    """A Standard Webhooks receiver refuses a timestamp over 5 minutes off its clock: a retry of a delivery made
    an hour ago must carry the retry's own time, or every late retry is refused."""
    endpoint, secret = env.hooks.add_endpoint("alpha", receiver.url, [EventType.generation_succeeded])
    receiver.script = [500]
    run_job(env.queue, catalog, "alpha")
    # Until the refused attempt is recorded, not until it arrives: the sender records it after the answer.
    env.drain(lambda: [d.attempt_count for d in env.hooks.store.list_deliveries(endpoint.id)] == [1])
    [failed] = env.hooks.store.list_deliveries(endpoint.id)
    assert failed.state is DeliveryState.pending and len(receiver.received) == 1
    # The delivery as it would be an hour later: made then, due now.
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    env.hooks.store.save_delivery(
        failed.model_copy(update={"created_at": an_hour_ago, "next_attempt_at": datetime.now(UTC)})
    )
    env.drain(lambda: states(env, endpoint) == [DeliveryState.delivered])
    retry = receiver.received[-1]
    assert retry.webhook_id == failed.id
    assert abs(int(retry.headers["webhook-timestamp"]) - time.time()) < 60
    assert Webhook(secret).verify(retry.body, retry.headers)["type"] == "generation.succeeded"


def test_canceled_and_new_endpoints(env: Env, receiver: Receiver, catalog: Catalog) -> None:
    from tests.integration.worker_harness import make_record

    record = make_record(catalog, "tiny-wan").model_copy(update={"project": "alpha"})
    env.queue.enqueue(record)
    env.sender.fan_out()  # the queued event is read before any endpoint exists
    endpoint, _ = env.hooks.add_endpoint("alpha", receiver.url)
    env.queue.cancel(record.id)
    env.drain(lambda: states(env, endpoint) == [DeliveryState.delivered])
    assert [r.payload["type"] for r in receiver.received] == ["generation.canceled"]


def test_verify_webhook_rejects_tampering_and_replays() -> None:
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = '{"type":"generation.succeeded","timestamp":"t","data":{"id":"gen_1"}}'
    headers = signed_headers(secret, "msg_1", body, datetime.now(UTC))
    assert verify_webhook(headers, body.encode(), secret)["data"]["id"] == "gen_1"
    with pytest.raises(InvalidWebhook):
        verify_webhook(headers, body.replace("gen_1", "gen_2"), secret)
    with pytest.raises(InvalidWebhook):
        verify_webhook(headers, body, "whsec_" + "A" * 32)
    old = signed_headers(secret, "msg_1", body, datetime.now(UTC) - timedelta(minutes=10))
    with pytest.raises(InvalidWebhook, match="too old"):
        verify_webhook(old, body, secret)
    with pytest.raises(InvalidWebhook):
        verify_webhook({k: v for k, v in headers.items() if k != "webhook-id"}, body, secret)


def test_redirects_are_not_followed(tmp_path: Path, receiver: Receiver, catalog: Catalog) -> None:
    env = make_env(tmp_path, backoff_base_s=30.0, backoff_cap_s=30.0)
    target = _start_other_receiver()
    try:
        receiver.default, receiver.redirect_to = 302, target.url
        endpoint, _ = env.hooks.add_endpoint("alpha", receiver.url, [EventType.generation_failed])
        run_job(env.queue, catalog, "alpha", Status.failed)
        env.drain(
            lambda: (
                bool(env.hooks.store.list_deliveries(endpoint.id)[:1])
                and env.hooks.store.list_deliveries(endpoint.id)[0].attempt_count == 1
            )
        )
        [d] = env.hooks.store.list_deliveries(endpoint.id)
        assert d.state is DeliveryState.pending and d.attempts[0].status_code == 302
        assert len(receiver.received) == 1 and target.received == []
    finally:
        target.server.shutdown()
        target.server.server_close()
        env.sender.close()
        env.hooks.close()
        env.queue.close()


def _start_other_receiver() -> Receiver:
    from tests.webhooks.conftest import start_receiver

    return start_receiver()


def test_refused_at_delivery_is_logged(
    env: Env, receiver: Receiver, catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    # Registered while allowed; the name now resolves to loopback and is not an allowed host (a DNS
    # change after registration): the sender re-checks and refuses before connecting.
    endpoint, _ = env.hooks.add_endpoint("alpha", receiver.url, [EventType.generation_succeeded])
    moved = endpoint.model_copy(update={"url": receiver.url.replace("http://127.0.0.1", "https://localhost")})
    env.hooks.store.save_endpoint(moved)
    run_job(env.queue, catalog, "alpha")
    with caplog.at_level(logging.WARNING, logger="genworker.webhooks"):
        env.drain(lambda: states(env, endpoint) == [DeliveryState.failed])
    [d] = env.hooks.store.list_deliveries(endpoint.id)
    assert d.failure_reason is not None and "refused" in d.failure_reason
    assert "public addresses only" in d.failure_reason and "loopback" not in d.failure_reason
    assert receiver.received == []
    assert any("refused" in r.getMessage() for r in caplog.records)


def test_endpoint_disabled_after_a_failure_run_then_redelivered(
    tmp_path: Path, receiver: Receiver, catalog: Catalog
) -> None:
    env = make_env(tmp_path, disable_after_failures=3, disable_after_s=0.0, backoff_base_s=0.05, backoff_cap_s=0.1)
    try:
        receiver.default = 500
        endpoint, secret = env.hooks.add_endpoint("alpha", receiver.url, [EventType.generation_succeeded])
        record = run_job(env.queue, catalog, "alpha")
        env.drain(lambda: states(env, endpoint) == [DeliveryState.failed])
        stored = env.hooks.store.get_endpoint(endpoint.id)
        assert stored is not None and not stored.active
        assert stored.disabled_reason is not None and "3 failed attempts in a row" in stored.disabled_reason
        [d] = env.hooks.store.list_deliveries(endpoint.id)
        assert d.attempt_count == 3 and d.failure_reason is not None and "endpoint disabled" in d.failure_reason

        receiver.default = 200
        env.hooks.enable(endpoint.id)
        env.hooks.redeliver(d.id)
        env.drain(lambda: states(env, endpoint) == [DeliveryState.delivered])
        ids = {r.webhook_id for r in receiver.received}
        assert ids == {delivery_id(endpoint.id, record.id, EventType.generation_succeeded)}
        assert verify_webhook(receiver.received[-1].headers, receiver.received[-1].body, secret)["type"] == (
            "generation.succeeded"
        )
    finally:
        env.sender.close()
        env.hooks.close()
        env.queue.close()


def test_gives_up_after_max_age(tmp_path: Path, receiver: Receiver, catalog: Catalog) -> None:
    env = make_env(tmp_path, max_age_s=0.5, backoff_base_s=0.1, backoff_cap_s=0.2)
    try:
        receiver.default = 500
        endpoint, _ = env.hooks.add_endpoint("alpha", receiver.url, [EventType.generation_succeeded])
        run_job(env.queue, catalog, "alpha")
        env.drain(lambda: states(env, endpoint) == [DeliveryState.failed])
        [d] = env.hooks.store.list_deliveries(endpoint.id)
        assert d.failure_reason is not None and "no 2xx answer" in d.failure_reason and d.attempt_count >= 2
    finally:
        env.sender.close()
        env.hooks.close()
        env.queue.close()


def test_sealed_secret_is_not_the_secret(env: Env) -> None:
    endpoint, secret = env.hooks.add_endpoint("alpha", "https://93.184.216.34/hook")
    assert secret.startswith("whsec_") and secret not in endpoint.sealed_secret
    assert env.hooks.sealer.open(endpoint.sealed_secret) == secret


def test_a_sender_with_another_server_key_leaves_the_delivery_pending(
    env: Env, receiver: Receiver, catalog: Catalog
) -> None:
    from cryptography.fernet import Fernet

    from api.webhooks.sealing import Sealer

    endpoint, _ = env.hooks.add_endpoint("alpha", receiver.url, [EventType.generation_succeeded])
    run_job(env.queue, catalog, "alpha")
    stranger = Sender(
        env.queue, env.hooks.store, Sealer(Fernet.generate_key()), env.hooks.transport, env.settings.webhooks
    )
    try:
        stranger.run_once()
    finally:
        stranger.close()
    [d] = env.hooks.store.list_deliveries(endpoint.id)
    assert d.state is DeliveryState.pending and d.attempt_count == 0 and receiver.received == []

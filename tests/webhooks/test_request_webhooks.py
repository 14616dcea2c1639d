"""Per-request webhooks (a create's ``webhook_url``): on ``/v1/generations`` and ``/v1/videos`` over a real
uvicorn and SQLite queue, delivered by the real sender to a receiver on loopback (allow-listed), signed with
the project's secret and verified with the ``standardwebhooks`` library."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import openai
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from api.webhooks.breaker import after_attempt
from api.webhooks.models import Delivery, EventType, origin_id
from api.webhooks.sender import Sender, fresh_origin, signed_headers
from api.webhooks.transport import PostResult
from foundation.settings import WebhookSettings
from tests.webhooks.conftest import Receiver, finish_job
from tests.webhooks.test_routes import Api


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One API for the module (loopback allowed); each test uses its own generations, project or receiver."""
    a = Api(tmp_path_factory.mktemp("request-hooks"), {})
    yield a
    a.stop()


BODY = {
    "model": "tiny-wan",
    "mode": "text_to_video",
    "variant": "standard",
    "parameters": {"resolution": "144p", "ratio": "16:9", "duration_seconds": 1},
    "input": {"prompt": "a fox"},
}


def deliver(api: Api, receiver: Receiver, count: int) -> None:
    """Run the real sender until ``count`` requests reached the receiver; its close waits for the write-backs."""
    sender = Sender(api.queue, api.webhooks.store, api.webhooks.sealer, api.webhooks.transport, api.settings.webhooks)
    deadline = time.monotonic() + 10
    try:
        while len(receiver.received) < count:
            assert time.monotonic() < deadline, receiver.received
            if not sender.run_once():
                time.sleep(0.02)
    finally:
        sender.close()


def test_a_create_with_a_webhook_url_gets_its_events_signed_with_the_project_secret(
    api: Api, receiver: Receiver
) -> None:
    with api.client("alpha") as c, api.client("alpha_read") as reader, api.client("beta") as other:
        body = {**BODY, "webhook_url": receiver.url, "webhook_events": ["generation.succeeded"]}
        r = c.post("/v1/generations", json=body)
        assert r.status_code == 202, r.text
        gen_id = r.json()["id"]
        # The URL is the creator's: no view of the generation shows it.
        assert "webhook" not in r.text and "webhook" not in c.get(f"/v1/generations/{gen_id}").text
        assert "webhook" not in c.get("/v1/generations").text

        finish_job(api.queue, gen_id)
        deliver(api, receiver, 1)
        [got] = receiver.received  # generation.running was not chosen
        assert reader.get("/v1/webhooks/signing-secret").status_code == 403  # a read key cannot forge one
        secret = c.get("/v1/webhooks/signing-secret").json()["secret"]
        assert secret.startswith("whsec_") and secret != other.get("/v1/webhooks/signing-secret").json()["secret"]
        payload = Webhook(secret).verify(got.body, got.headers)
        assert payload["type"] == "generation.succeeded" and payload["data"]["id"] == gen_id
        with pytest.raises(WebhookVerificationError):  # another project's secret does not verify it
            Webhook(other.get("/v1/webhooks/signing-secret").json()["secret"]).verify(got.body, got.headers)

        log = reader.get(f"/v1/webhooks/generations/{gen_id}/deliveries").json()["data"]
        assert [(d["id"], d["state"], d["url"]) for d in log] == [(got.webhook_id, "delivered", receiver.url)]
        assert other.get(f"/v1/webhooks/generations/{gen_id}/deliveries").json()["data"] == []
        again = f"/v1/webhooks/generations/{gen_id}/deliveries/{got.webhook_id}/redeliver"
        assert other.post(again).status_code == 404
        assert c.post(again).status_code == 202

        # A rotation: the next attempt carries both signatures, and either secret verifies it.
        rotated = c.post("/v1/webhooks/signing-secret/rotate", json={"grace_seconds": 60}).json()
        assert rotated["secret"] != secret and rotated["previous_expires_at"] is not None
        deliver(api, receiver, 2)
        resent = receiver.received[1]
        assert resent.webhook_id == got.webhook_id and len(resent.headers["webhook-signature"].split()) == 2
        for key in (secret, rotated["secret"]):
            assert Webhook(key).verify(resent.body, resent.headers)["data"]["id"] == gen_id


def test_every_event_by_default_and_the_idempotency_key_counts_the_webhook(api: Api, receiver: Receiver) -> None:
    with api.client("alpha") as c:
        headers = {"Idempotency-Key": "k-1"}
        made = c.post("/v1/generations", json={**BODY, "webhook_url": receiver.url}, headers=headers)
        assert made.status_code == 202, made.text
        replay = c.post("/v1/generations", json={**BODY, "webhook_url": receiver.url}, headers=headers)
        assert replay.headers.get("Idempotent-Replayed") == "true" and replay.json()["id"] == made.json()["id"]
        other_url = receiver.url.replace("/hook", "/other")
        conflict = c.post("/v1/generations", json={**BODY, "webhook_url": other_url}, headers=headers)
        assert conflict.status_code == 409, conflict.text
        assert c.post("/v1/generations", json=BODY, headers=headers).status_code == 409

    gen_id = made.json()["id"]
    finish_job(api.queue, gen_id)
    deliver(api, receiver, 2)
    assert sorted(r.payload["type"] for r in receiver.received) == ["generation.running", "generation.succeeded"]


def test_refused_webhooks_are_coded_400s_and_enqueue_nothing(api: Api) -> None:
    with api.client("beta") as c:
        for body, code, param in [
            ({**BODY, "webhook_url": "https://169.254.169.254/"}, "invalid_webhook_url", "webhook_url"),
            ({**BODY, "webhook_url": "ftp://93.184.216.34/h"}, "invalid_webhook_url", "webhook_url"),
            # A CR/LF would be stored and sent on as is (URL parsing drops it, the stored string keeps it).
            ({**BODY, "webhook_url": "https://93.184.216.34/h\r\nX-Injected: 1"}, "invalid_webhook_url", "webhook_url"),
            ({**BODY, "webhook_url": "https://93.184.216.34/h\tx"}, "invalid_webhook_url", "webhook_url"),
            ({**BODY, "webhook_events": ["generation.succeeded"]}, None, None),  # events without a URL
            ({**BODY, "webhook_url": "https://93.184.216.34/h", "webhook_events": ["nope"]}, None, None),
            ({"model": "tiny-wan", "prompt": "x", "webhook_url": "https://10.0.0.1/h"}, None, "webhook_url"),
            (
                {"model": "tiny-wan", "prompt": "x", "webhook_url": "https://93.184.216.34/h", "webhook_events": "x"},
                None,
                "webhook_events",
            ),
        ]:
            route = "/v1/videos" if "prompt" in body else "/v1/generations"
            r = c.post(route, json=body)
            assert r.status_code == 400, (body, r.text)
            error = r.json()["error"]
            assert code is None or error["code"] == code
            assert param is None or error["param"] == param
        assert c.get("/v1/generations").json()["data"] == []


@pytest.mark.filterwarnings("ignore:The Sora API is scheduled:DeprecationWarning")
def test_videos_take_the_webhook_as_a_form_field_or_json(api: Api, receiver: Receiver) -> None:
    with api.client("alpha") as c:
        form = {
            "model": "tiny-wan",
            "prompt": "a lighthouse",
            "seconds": "1",
            "size": "256x144",
            "webhook_url": receiver.url,
            "webhook_events": "generation.succeeded, generation.failed",
        }
        made = c.post("/v1/videos", files={"prompt": (None, form.pop("prompt"))}, data=form)
        assert made.status_code == 200, made.text
        by_json = c.post("/v1/videos", json={"model": "tiny-wan", "prompt": "waves", "webhook_url": receiver.url})
        assert by_json.status_code == 200, by_json.text
        assert "webhook" not in made.text + by_json.text
    sdk = openai.OpenAI(base_url=f"{api.base_url}/v1", api_key=api.tokens["alpha"], max_retries=0)
    with sdk:  # the openai SDK sends it in extra_body
        by_sdk = sdk.videos.create(model="tiny-wan", prompt="rain", extra_body={"webhook_url": receiver.url})
    store = api.webhooks.store
    sdk_hook = store.get_request_webhook(by_sdk.id)
    assert sdk_hook is not None and sdk_hook.url == receiver.url
    hook = store.get_request_webhook(made.json()["id"])
    assert hook is not None and hook.url == receiver.url and hook.project == "alpha"
    assert [e.value for e in hook.events] == ["generation.failed", "generation.succeeded"]
    json_hook = store.get_request_webhook(by_json.json()["id"])
    assert json_hook is not None and len(json_hook.events) == 4


def test_one_receiver_is_one_origin_for_the_slots_and_its_breaker_never_disables_it() -> None:
    url = "https://hooks.example.com/a?x=1"
    assert origin_id("alpha", url) == origin_id("alpha", "https://HOOKS.example.com:443/b")
    assert origin_id("alpha", url) != origin_id("beta", url)  # each project has its own share
    assert origin_id("alpha", url) != origin_id("alpha", "https://hooks.example.com:8443/a")
    now = datetime.now(UTC)
    delivery = Delivery(
        id="msg_1",
        endpoint_id=origin_id("alpha", url),
        project="alpha",
        event_type=EventType.generation_succeeded,
        generation_id="gen_1",
        body="{}",
        url=url,
        created_at=now - timedelta(days=2),
    )
    settings = WebhookSettings(circuit_after_failures=2, disable_after_failures=2, disable_after_s=0)
    origin = fresh_origin(delivery).model_copy(update={"failing_since": now - timedelta(days=1)})
    failed = PostResult(status_code=500)
    for _ in range(3):
        step = after_attempt(origin, failed, now, settings, may_disable=False)
        origin = step.endpoint
        assert not step.disabled and origin.active
    assert origin.consecutive_failures == 3 and origin.circuit_open_until is not None
    # The same run on a registered endpoint disables it.
    assert after_attempt(origin, failed, now, settings).disabled


def test_two_secrets_make_two_signatures_each_verifiable() -> None:
    first, second = "whsec_" + "A" * 43 + "=", "whsec_" + "B" * 43 + "="
    at = datetime.now(UTC)
    headers = signed_headers([first, second], "msg_1", '{"a":1}', at)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for key in (first, second):
        assert Webhook(key).verify('{"a":1}', headers) == {"a": 1}
    assert httpx.Headers(signed_headers(first, "msg_1", "{}", at))["webhook-signature"].count(" ") == 0

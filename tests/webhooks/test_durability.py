"""At-least-once across crashes, on real processes: `genworker webhooks serve` killed -9 while a
delivery waits for its retry, then the sender inside `genworker api`, stopped and started again while
jobs finish. The receiver must see exactly one logical delivery per event (retries only under the
same webhook-id), each verified by the Standard Webhooks verifier."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from cryptography.fernet import Fernet

from api.api_keys import Scope, SqliteKeyStore
from api.webhooks.models import DeliveryState, EventType
from api.webhooks.service import open_webhooks
from api.webhooks.store import SqliteWebhookStore
from foundation.core.catalog import Catalog
from foundation.queue.factory import open_queue
from foundation.settings import Settings
from genworker_client import verify_webhook
from tests.e2e.conftest import free_port
from tests.webhooks.conftest import HANG, Receiver, run_job

GENWORKER = [sys.executable, "-m", "genworker"]


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([*GENWORKER, *args], env=env, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout=20)


def test_sender_killed_mid_backoff_and_api_restarts_lose_nothing(
    tmp_path: Path, receiver: Receiver, catalog: Catalog
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "GENWORKER_DATA_DIR": str(tmp_path),
        "GENWORKER_QUEUE__BACKEND": "sqlite",
        "GENWORKER_API__PORT": str(port),
        "GENWORKER_WEBHOOKS__ALLOWED_HOSTS": '["127.0.0.1:*"]',
        "GENWORKER_WEBHOOKS__BACKOFF_BASE_S": "3",  # the retry waits 1.5-3 s: time to kill the sender
        "GENWORKER_WEBHOOKS__BACKOFF_CAP_S": "3",
        "GENWORKER_WEBHOOKS__POLL_INTERVAL_S": "0.05",
        "GENWORKER_WEBHOOKS__LEASE_S": "2",
    }
    settings = Settings(data_dir=str(tmp_path))
    queue = open_queue(settings.queue)
    store = SqliteWebhookStore(tmp_path / "webhooks.db")
    keys = SqliteKeyStore(tmp_path / "keys.db")
    log = tmp_path / "processes.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        added = subprocess.run(
            [*GENWORKER, "webhooks", "add", "--project", "alpha", "--url", receiver.url],
            env=env,
            capture_output=True,
            check=True,
            timeout=60,
        )
        secret = added.stdout.decode().strip()
        [endpoint] = store.list_endpoints()

        # 1. A standalone sender; the receiver fails the first attempt it sees.
        receiver.script = [500]
        procs.append(start(["webhooks", "serve"], env, log))
        first = run_job(queue, catalog, "alpha")

        def one_in_backoff() -> bool:
            found = store.list_deliveries(endpoint.id)
            return sorted((d.state, d.attempt_count) for d in found) == [
                (DeliveryState.delivered, 1),
                (DeliveryState.pending, 1),
            ]

        wait_for(one_in_backoff, "one delivery accepted and one waiting for its retry")
        procs[-1].send_signal(signal.SIGKILL)  # mid-backoff: its retry is only in the store
        procs[-1].wait(timeout=10)
        assert one_in_backoff() and len(receiver.received) == 2

        # 2. No sender runs while the next job finishes; then the API's sender takes over.
        second = run_job(queue, catalog, "alpha")
        procs.append(start(["api"], env, log))
        wait_for(lambda: len(receiver.accepted()) == 4 and len(receiver.received) == 5, "the API's sender")

        # 3. The API stops, a job finishes, the API starts again.
        stop(procs[-1])
        third = run_job(queue, catalog, "alpha")
        procs.append(start(["api"], env, log))
        wait_for(lambda: len(receiver.accepted()) == 6, "deliveries after the API restart")
        token = keys.create("alpha", [Scope.generations_read])[1]
        answer = httpx.get(
            f"http://127.0.0.1:{port}/v1/webhooks/{endpoint.id}/deliveries",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        assert {d["state"] for d in answer.json()["data"]} == {"delivered"}
        assert sorted(d["attempt_count"] for d in answer.json()["data"]) == [1, 1, 1, 1, 1, 2]
        stop(procs[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop(proc, signal.SIGKILL)
        queue.close()
        store.close()
        keys.close()

    expected = {(g.id, t) for g in (first, second, third) for t in ("generation.running", "generation.succeeded")}
    logical = receiver.accepted()
    assert {(r.payload["data"]["id"], r.payload["type"]) for r in logical.values()} == expected
    assert len(receiver.received) == 7  # six deliveries and one retry
    retried = [r for r in receiver.received if r.webhook_id == receiver.received[0].webhook_id]
    assert len(retried) == 2 and retried[0].body == retried[1].body  # the retry: same id, same bytes
    for r in receiver.received:
        assert verify_webhook(r.headers, r.body, secret)["type"] == r.payload["type"]


def test_sender_killed_mid_send_on_redis_resends_under_the_same_id(
    tmp_path: Path, receiver: Receiver, catalog: Catalog, redis_url: str
) -> None:
    env = {
        **os.environ,
        "GENWORKER_DATA_DIR": str(tmp_path),
        "GENWORKER_QUEUE__BACKEND": "redis",
        "GENWORKER_QUEUE__REDIS_URL": redis_url,
        "GENWORKER_WEBHOOKS__ALLOWED_HOSTS": '["127.0.0.1:*"]',
        "GENWORKER_WEBHOOKS__POLL_INTERVAL_S": "0.05",
        "GENWORKER_WEBHOOKS__LEASE_S": "2",  # a claim whose sender died is due again after 2 s
    }
    server_key = Fernet.generate_key().decode()
    settings = Settings(
        data_dir=str(tmp_path),
        queue={"backend": "redis", "redis_url": redis_url},
        webhooks={"allowed_hosts": ["127.0.0.1:*"], "secret_key": server_key},
    )
    env["GENWORKER_WEBHOOKS__SECRET_KEY"] = server_key  # every sender opens the secrets with one key
    queue = open_queue(settings.queue)
    hooks = open_webhooks(settings)
    log = tmp_path / "processes.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        endpoint, secret = hooks.add_endpoint("alpha", receiver.url, [EventType.generation_succeeded])
        receiver.script = [HANG]
        procs.append(start(["webhooks", "serve"], env, log))
        record = run_job(queue, catalog, "alpha")
        wait_for(lambda: len(receiver.received) == 1, "the first attempt to be in flight")
        procs[-1].send_signal(signal.SIGKILL)  # mid-send: nothing was written back
        procs[-1].wait(timeout=10)
        procs.append(start(["webhooks", "serve"], env, log))
        wait_for(
            lambda: [d.state for d in hooks.store.list_deliveries(endpoint.id)] == [DeliveryState.delivered],
            "the resend after the lease",
        )
        stop(procs[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop(proc, signal.SIGKILL)
        hooks.close()
        queue.close()
    first, again = receiver.received
    assert first.webhook_id == again.webhook_id and first.body == again.body
    assert verify_webhook(again.headers, again.body, secret)["data"]["id"] == record.id

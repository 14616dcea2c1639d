"""One webhook key per deployment: `genworker api` processes over one Redis deliver each other's webhooks,
through a key rotation, and an API on Redis without the key refuses to start, naming the setting.

Each replica has a data directory of its own, as each pod does (issue 40: with a key file per replica,
another replica's deliveries stayed pending for ever with 0 attempts).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet

from api.api_keys import Scope
from api.server import open_key_store
from api.webhooks.models import DeliveryState
from api.webhooks.redis_store import RedisWebhookStore
from foundation.core.catalog import Catalog
from foundation.queue.factory import open_queue
from foundation.settings import Settings, settings_env
from genworker_client import verify_webhook
from tests.e2e.conftest import free_port
from tests.webhooks.conftest import Receiver, run_job

GENWORKER = [sys.executable, "-m", "genworker"]
OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _env(tmp_path: Path, name: str, redis_url: str, keys: str | None, *, sender: bool) -> dict[str, str]:
    hooks: dict[str, object] = {"allowed_hosts": ["127.0.0.1:*"], "poll_interval_s": 0.1, "sender_in_api": sender}
    if keys is not None:
        hooks["secret_key"] = keys
    settings = {"data_dir": str(tmp_path / name), "queue": {"backend": "redis", "redis_url": redis_url}}
    base = {k: v for k, v in os.environ.items() if not k.startswith("GENWORKER_")}
    return {**base, **settings_env({**settings, "webhooks": hooks})}


@dataclass
class Replica:
    """One `genworker api` process with a data dir of its own."""

    name: str
    env: dict[str, str]
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        with self.log.open("ab") as out:
            cmd = [*GENWORKER, "api", "--host", "127.0.0.1", "--port", str(self.port)]
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT)

        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, f"replica {self.name} to serve")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for r in started:
        r.stop()


def test_an_api_on_redis_without_the_key_refuses_to_start(tmp_path: Path, redis_url: str) -> None:
    env = _env(tmp_path, "a", redis_url, None, sender=True)
    cmd = [*GENWORKER, "api", "--port", str(free_port())]
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr.decode()[-2000:]
    message = done.stderr.decode()
    assert "webhooks.secret_key" in message and "GENWORKER_WEBHOOKS__SECRET_KEY" in message
    assert "Traceback" not in message


def test_replicas_deliver_each_others_webhooks_through_a_key_rotation(
    tmp_path: Path, redis_url: str, receiver: Receiver, catalog: Catalog, replicas: list[Replica]
) -> None:
    settings = Settings(data_dir=str(tmp_path), queue={"backend": "redis", "redis_url": redis_url})
    keys = open_key_store(settings)
    token = {p: keys.create(p, [Scope.generations_read, Scope.generations_write])[1] for p in ("alpha", "beta")}
    keys.close()
    queue = open_queue(settings.queue)
    store = RedisWebhookStore.from_url(redis_url)

    def register(replica: Replica, project: str) -> tuple[str, str]:
        answer = httpx.post(
            f"{replica.url}/v1/webhooks",
            json={"url": f"{receiver.url}?{project}", "events": ["generation.succeeded"]},
            headers={"Authorization": f"Bearer {token[project]}"},
            timeout=10,
        )
        assert answer.status_code == 201, answer.text
        return answer.json()["id"], answer.json()["secret"]

    def delivered(count: int) -> Callable[[], bool]:
        def check() -> bool:
            found = [d.state for e in store.list_endpoints() for d in store.list_deliveries(e.id)]
            return found.count(DeliveryState.delivered) == count and len(found) == count

        return check

    def start(name: str, keys: str, *, sender: bool) -> Replica:
        replica = Replica(name, _env(tmp_path, name, redis_url, keys, sender=sender), tmp_path / f"{name}.log")
        replicas.append(replica.start())
        return replica

    try:
        # 1. Rotation under way: replica a seals with the old key, b already with the new one (both open
        #    both). Only b sends: it delivers the endpoint a registered.
        a = start("a", OLD, sender=False)
        b = start("b", f"{NEW},{OLD}", sender=True)
        (_, alpha_secret), (_, beta_secret) = register(a, "alpha"), register(b, "beta")
        run_job(queue, catalog, "alpha")
        run_job(queue, catalog, "beta")
        wait_for(delivered(2), "b delivering a's and its own")

        # 2. a takes the new key first too and sends; b stops sending: a delivers the endpoint b registered.
        a.stop(), b.stop()
        a = start("a2", f"{NEW},{OLD}", sender=True)
        b = start("b2", f"{NEW},{OLD}", sender=False)
        run_job(queue, catalog, "alpha")
        run_job(queue, catalog, "beta")
        wait_for(delivered(4), "a delivering b's and its own")

        # 3. Every secret moved under the new key; the old key is dropped everywhere.
        a.stop(), b.stop()
        reseal_env = _env(tmp_path, "ops", redis_url, f"{NEW},{OLD}", sender=False)
        cmd = [*GENWORKER, "webhooks", "reseal"]
        done = subprocess.run(cmd, env=reseal_env, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0 and "resealed 1 secret(s)" in done.stderr.decode(), done.stderr.decode()
        start("a3", NEW, sender=True)
        start("b3", NEW, sender=True)
        run_job(queue, catalog, "alpha")
        run_job(queue, catalog, "beta")
        wait_for(delivered(6), "both replicas on the new key alone")
    finally:
        queue.close()
        store.close()

    secrets = {"alpha": alpha_secret, "beta": beta_secret}
    received = receiver.accepted().values()
    assert sorted(r.path.rsplit("?", 1)[1] for r in received) == ["alpha"] * 3 + ["beta"] * 3
    for r in received:  # each endpoint's own secret signs its deliveries, whoever sent them
        project = r.path.rsplit("?", 1)[1]
        assert verify_webhook(r.headers, r.body, secrets[project])["data"]["project"] == project

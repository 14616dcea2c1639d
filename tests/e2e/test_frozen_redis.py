"""A Redis that stops answering (SIGSTOP: a frozen host, a stalled failover) costs an API request at most
``api.queue_timeout_s``, then a 503 with ``Retry-After``, not the workers' longer ``queue.socket_timeout_s`` (15 s);
once Redis answers again, so does the API. The API is a real ``genworker api`` process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from cryptography.fernet import Fernet

from api.server import open_key_store
from foundation.settings import Settings, settings_env
from tests.e2e.conftest import READ, WRITE, create_body, free_port
from tests.fixtures.redis_server import start_redis
from tests.integration.worker_harness import wait_until


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_frozen_redis_gets_a_503_within_the_apis_bound(tmp_path: Path) -> None:
    redis = start_redis(tmp_path / "redis")
    port = free_port()
    values = {
        "data_dir": str(tmp_path / "data"),
        "queue": {"backend": "redis", "redis_url": redis.url},
        "store": {"backend": "local", "local_root": str(tmp_path / "artifacts")},
        "api": {"port": port, "queue_timeout_s": 2.0},
        "webhooks": {"secret_key": Fernet.generate_key().decode(), "sender_in_api": False},
    }
    settings = Settings.model_validate(values)
    assert settings.queue.socket_timeout_s == 15.0  # the workers' bound, which the API no longer waits out
    keys = open_key_store(settings)
    _, token = keys.create("alpha", [READ, WRITE])
    keys.close()
    env = {**os.environ, **settings_env(values), "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "api.log").open("wb")
    api = subprocess.Popen([sys.executable, "-m", "genworker.cli", "api"], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(f"{base}/healthz"), "the API answering", 60)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            created = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": "frozen-1"})
            assert created.status_code == 202, created.text
            job_id = created.json()["id"]
            assert redis.proc is not None
            redis.proc.send_signal(signal.SIGSTOP)
            try:
                started = time.monotonic()
                frozen = c.get(f"/v1/generations/{job_id}")
                took = time.monotonic() - started
            finally:
                redis.proc.send_signal(signal.SIGCONT)
            assert frozen.status_code == 503, frozen.text
            assert frozen.json()["error"]["code"] == "service_unavailable" and frozen.headers["retry-after"] == "2"
            assert took < 10, took  # 2 s a command: well under the 15 s the workers' timeout would hold it
            answered = c.get(f"/v1/generations/{job_id}")
            assert answered.status_code == 200 and answered.json()["status"] == "queued"
    finally:
        api.send_signal(signal.SIGTERM)
        api.wait(timeout=30)
        log.close()
        redis.stop()

"""The API's operator surface on real servers: ``/healthz``, ``/readyz``, JSON access lines and the
``X-Request-Id`` header.

The in-process stack (SQLite queue, local store) checks the endpoints and the request id; a real
``genworker api`` process over its own redis-server and SeaweedFS checks readiness through a Redis
outage and the log lines the operator actually gets on stderr.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.api_keys import SqliteKeyStore
from api.app import create_app
from foundation.core.catalog import load_catalog
from foundation.queue.factory import open_queue
from foundation.settings import Settings, settings_env
from foundation.stores.s3 import S3Store
from tests.e2e.conftest import Stack, add_keys, free_port, serve_app, start_stack
from tests.fixtures.redis_server import RedisServer

HEX_ID = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def strict_stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack whose keys may make one request per 100 s: the second one is rate limited."""
    s = start_stack(tmp_path / "api", api={"rate_limit_per_s": 0.01, "rate_limit_burst": 1})
    add_keys(s)
    yield s
    s.stop()


def test_healthz_and_readyz_answer_without_a_key_and_without_a_rate_limit(strict_stack: Stack) -> None:
    with strict_stack.client("alpha") as c:
        assert c.get("/v1/models").status_code == 200  # /v1/models needs no key either; this spends none
        assert c.get("/v1/generations").status_code == 200
        assert c.get("/v1/generations").status_code == 429  # the key's one request is spent
        for _ in range(20):
            assert c.get("/healthz").json() == {"status": "ok"}
            ready = c.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json() == {"status": "ready", "checks": {"queue": {"ok": True}, "store": {"ok": True}}}
    with strict_stack.client() as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/readyz").status_code == 200


def test_readyz_names_the_dependency_that_is_down_never_its_address(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store the API cannot reach: 503 naming ``store`` and the kind of failure; its endpoint and the
    driver's message are in the log only (the probe needs no key)."""
    closed = free_port()
    endpoint = f"http://127.0.0.1:{closed}"
    settings = Settings(
        data_dir=str(tmp_path),
        store={
            "backend": "s3",
            "s3_endpoint_url": endpoint,
            "s3_bucket": "unreachable-bucket",
            "s3_access_key_id": "k",
            "s3_secret_access_key": "internal-secret-7f3a",
        },
    )
    queue = open_queue(settings.queue)
    app = create_app(
        settings,
        queue=queue,
        store=S3Store(settings.store),
        catalog=load_catalog(),
        keys=SqliteKeyStore(tmp_path / "k.db"),
    )
    port = free_port()
    server, thread = serve_app(app, port)
    try:
        with caplog.at_level(logging.WARNING, logger="genworker.api.health"):
            down = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=30)
        assert down.status_code == 503
        body = down.json()
        assert body["status"] == "not_ready" and body["checks"]["queue"] == {"ok": True}
        assert body["checks"]["store"] in ({"ok": False, "reason": "unavailable"}, {"ok": False, "reason": "timeout"})
        for secret in (str(closed), "127.0.0.1", "unreachable-bucket", "internal-secret-7f3a", "Errno", "Error"):
            assert secret not in down.text, secret
        assert any(r.__dict__.get("check") == "store" for r in caplog.records)  # the details are logged
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        queue.close()


def test_probes_stay_out_of_the_public_schema(stack: Stack) -> None:
    with stack.client() as c:
        paths = c.get("/v1/openapi.json").json()["paths"]
    assert "/healthz" not in paths and "/readyz" not in paths


def test_request_id_is_echoed_when_sane_and_generated_otherwise(stack: Stack) -> None:
    with stack.client("alpha") as c:
        mine = c.get("/v1/generations", headers={"X-Request-Id": "req-1.a:b_C"})
        assert mine.status_code == 200 and mine.headers["X-Request-Id"] == "req-1.a:b_C"
        for bad in ("a b", "x" * 129, "é", ""):
            answered = c.get("/v1/generations", headers={"X-Request-Id": bad.encode()})
            assert HEX_ID.fullmatch(answered.headers["X-Request-Id"]), bad
        fresh = [c.get("/healthz").headers["X-Request-Id"] for _ in range(3)]
        assert all(HEX_ID.fullmatch(i) for i in fresh) and len(set(fresh)) == 3
        # Errors carry it too: the id is what an operator searches the log for.
        missing = c.get("/v1/generations/gen_nope", headers={"X-Request-Id": "trace-404"})
        assert missing.status_code == 404 and missing.headers["X-Request-Id"] == "trace-404"
        assert len(missing.headers.get_list("X-Request-Id")) == 1


# ------------------------------------------------------------------------------------------------------
# A real `genworker api` process over its own Redis (stopped and restarted here) and SeaweedFS.


def _start_api(redis: RedisServer, seaweed: Any, data_dir: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    store = seaweed.store_settings()
    s3 = ("backend", "s3_endpoint_url", "s3_bucket", "s3_region", "s3_access_key_id", "s3_secret_access_key")
    settings = {
        "data_dir": str(data_dir),
        "queue": {"backend": "redis", "redis_url": redis.url},
        "store": {name: getattr(store, name) for name in s3},
        "webhooks": {"secret_key": base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")},  # required on Redis
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **settings_env(settings)}
    port = free_port()
    cmd = [sys.executable, "-m", "genworker.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def _until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout_s:g} s")


def _status(base_url: str, path: str) -> int | None:
    try:
        return httpx.get(base_url + path, timeout=5).status_code
    except httpx.TransportError:
        return None


@pytest.mark.slow
def test_a_distributed_api_is_unready_while_its_redis_is_down_and_logs_json(
    redis_factory: Callable[..., RedisServer], seaweed: Any, tmp_path: Path
) -> None:
    redis = redis_factory()
    log = tmp_path / "api.log"
    proc, base_url = _start_api(redis, seaweed, tmp_path / "data", log)
    try:
        _until(lambda: proc.poll() is None and _status(base_url, "/readyz") == 200, "ready")
        ready = httpx.get(base_url + "/readyz", timeout=5).json()
        assert ready == {"status": "ready", "checks": {"queue": {"ok": True}, "store": {"ok": True}}}

        redis.stop()
        down = httpx.get(base_url + "/readyz", timeout=10)
        assert down.status_code == 503
        body = down.json()
        assert body["status"] == "not_ready"
        # Which dependency is down and how, never its address or the driver's words (those go to the log).
        assert body["checks"]["queue"] in ({"ok": False, "reason": "unavailable"}, {"ok": False, "reason": "timeout"})
        assert body["checks"]["store"] == {"ok": True}
        assert str(redis.port) not in down.text and "127.0.0.1" not in down.text
        assert httpx.get(base_url + "/healthz", timeout=5).status_code == 200  # alive: no restart wanted

        redis.start()  # same port and directory
        _until(lambda: _status(base_url, "/readyz") == 200, "ready again after Redis came back")

        traced = httpx.get(base_url + "/v1/models?signature=sig-q7x3k9", headers={"X-Request-Id": "ops-trace-7"})
        assert traced.headers["X-Request-Id"] == "ops-trace-7"
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]

    lines = [line for line in log.read_text().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line, uvicorn's own included, is one JSON object
    assert all({"ts", "level", "logger", "msg"} <= set(e) for e in entries)
    assert any(e["logger"].startswith("uvicorn") for e in entries)
    access = [e for e in entries if e["logger"] == "genworker.api.access"]
    (line,) = [e for e in access if e.get("request_id") == "ops-trace-7"]
    assert line["level"] == "info" and line["method"] == "GET" and line["path"] == "/v1/models"
    assert line["status"] == traced.status_code and line["bytes"] == len(traced.content)
    assert isinstance(line["elapsed_ms"], float) and line["client"].startswith("127.0.0.1:")
    assert "sig-q7x3k9" not in log.read_text()  # the query string (a signed URL's signature) is never logged
    # A failing readiness probe is logged at INFO with its id; passing probes stay at DEBUG.
    failed = [e for e in access if e["path"] == "/readyz" and e["status"] == 503]
    assert failed and all(HEX_ID.fullmatch(e["request_id"]) for e in failed)
    assert not [e for e in access if e["path"] == "/readyz" and e["status"] == 200]
    health = [e for e in entries if e["logger"] == "genworker.api.health" and e.get("check") == "queue"]
    assert health and any(str(redis.port) in e["msg"] or "connect" in e["msg"].lower() for e in health), health

"""The distributed mode: a ``genworker api`` process and a ``genworker worker`` process that share only
a real redis-server (queue, keys, rate limits) and a real SeaweedFS (S3 artifacts, presigned URLs).
The whole fleet is started by ``genworker fleet up`` from one env file, as the operators' recipe says
(docs/operators.md), so the recipe cannot rot. Keys are issued and revoked with the ``genworker keys``
CLI, as an operator would."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from api.auth import KEY_CACHE_TTL_S
from genworker.fleet import read_env_file
from tests.e2e.conftest import assert_error, create_body, free_port
from tests.e2e.test_embedded_mode import poll_until_terminal, wait_until_available

pytestmark = pytest.mark.slow


def genworker(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genworker.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def fleet_env_file(tmp_path: Path, tiny_models_dir: Path) -> Path:
    """``genworker fleet init`` on free loopback ports, plus the test's own settings."""
    path = tmp_path / "fleet.env"
    ports = {name: str(free_port()) for name in ("--redis-port", "--s3-port", "--api-port")}
    made = genworker("fleet", "init", str(path), *(x for pair in ports.items() for x in pair), env=dict(os.environ))
    assert made.returncode == 0, made.stderr
    with path.open("a", encoding="utf-8") as f:
        f.write(f"GENWORKER_DATA_DIR={tmp_path / 'data'}\n")
        f.write(f"GENWORKER_MODELS__TINY_MODELS_DIR={tiny_models_dir}\n")
        f.write("GENWORKER_WORKER__HOSTED_MODELS='[\"tiny-wan\"]'\n")
        f.write("GENWORKER_API__POLL_FIRST_S=1\nGENWORKER_API__POLL_MIN_S=1\nGENWORKER_API__POLL_MAX_S=1\n")
    return path


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def test_api_and_worker_processes_over_redis_and_s3(tiny_models_dir: Path, tmp_path: Path) -> None:
    env_file = fleet_env_file(tmp_path, tiny_models_dir)
    values = read_env_file(env_file)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENWORKER_")} | values
    redis_url, s3_endpoint = values["GENWORKER_QUEUE__REDIS_URL"], values["GENWORKER_STORE__S3_ENDPOINT_URL"]
    fleet_log = tmp_path / "fleet.out"
    with fleet_log.open("wb") as out:  # the child keeps its own descriptor
        fleet = subprocess.Popen(
            [sys.executable, "-m", "genworker.cli", "fleet", "up", str(env_file), "--workers", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base_url = f"http://127.0.0.1:{values['GENWORKER_API__PORT']}"
    try:
        wait_until_available(base_url, fleet, "tiny-wan")
        fleet_key = (tmp_path / "data" / "fleet-api-key").read_text().strip()
        # The banner shows the fleet's own key; it may reach the log a moment after the API answers.
        deadline = time.monotonic() + 30
        while fleet_key not in fleet_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fleet_key in fleet_log.read_text()
        _operator_flow(env, redis_url, s3_endpoint, base_url)
    finally:
        assert stop(fleet) == 0, fleet_log.read_text()[-3000:]
    logs = tmp_path / "data" / "fleet" / "logs"
    assert {p.name for p in logs.iterdir()} == {"redis.log", "weed.log", "api.log", "worker-1.log"}
    with pytest.raises(httpx.TransportError):  # the fleet stopped its API with itself
        httpx.get(f"{base_url}/healthz", timeout=5)


def _operator_flow(env: dict[str, str], redis_url: str, s3_endpoint: str, base_url: str) -> None:
    made = genworker(
        "keys", "create", "--project", "acme", "--scope", "generations:write", "--scope", "generations:read", env=env
    )
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("gw_") and "\n" not in key  # the key alone on stdout
    listed = genworker("keys", "list", "--json", "--redis-url", redis_url, env=env)
    assert "acme" in listed.stdout and key not in listed.stdout
    key_id = next(k["id"] for k in json.loads(listed.stdout) if k["project"] == "acme")
    table = genworker("keys", "list", "--redis-url", redis_url, env=env)
    assert key_id in table.stdout and "acme" in table.stdout and key not in table.stdout
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        created = c.post("/v1/generations", json=create_body(duration_seconds=1), headers={"Idempotency-Key": "d1"})
        assert created.status_code == 202, created.text
        replay = c.post("/v1/generations", json=create_body(duration_seconds=1), headers={"Idempotency-Key": "d1"})
        assert replay.json()["id"] == created.json()["id"]
        assert replay.headers["Idempotent-Replayed"] == "true"
        final = poll_until_terminal(c, created.json()["id"])
        assert final["status"] == "succeeded", final.get("error")
        video = next(a for a in final["artifacts"] if a["kind"] == "video")
        # A presigned S3 URL straight to SeaweedFS, not through the API.
        assert video["download_url"].startswith(s3_endpoint)
        downloaded = httpx.get(video["download_url"], timeout=30)
        assert downloaded.status_code == 200
        assert hashlib.sha256(downloaded.content).hexdigest() == video["sha256"]
        again = c.get(f"/v1/generations/{final['id']}").json()["artifacts"][0]
        assert httpx.get(again["download_url"], timeout=30).status_code == 200

        revoked = genworker("keys", "revoke", key_id, "--redis-url", redis_url, env=env)
        assert revoked.returncode == 0, revoked.stderr
        time.sleep(KEY_CACHE_TTL_S)  # the API process trusts a key it read for at most this long
        assert_error(c.get(f"/v1/generations/{final['id']}"), 401, "unauthenticated")

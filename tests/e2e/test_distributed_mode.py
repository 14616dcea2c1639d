"""The distributed mode: a ``genworker api`` process and a ``genworker worker`` process that share only
a real redis-server (queue, keys, rate limits) and a real SeaweedFS (S3 artifacts, presigned URLs).
Keys are issued and revoked with the ``genworker keys`` CLI, as an operator would."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import assert_error, create_body, free_port
from tests.e2e.test_embedded_mode import poll_until_terminal, wait_until_available
from worker.settings import settings_env

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


def distributed_env(redis_url: str, seaweed, tiny_models_dir: Path, data_dir: Path) -> dict[str, str]:
    store = seaweed.store_settings()
    s3_fields = ("backend", "s3_endpoint_url", "s3_bucket", "s3_region", "s3_access_key_id", "s3_secret_access_key")
    settings = {
        "data_dir": str(data_dir),
        "queue": {"backend": "redis", "redis_url": redis_url},
        "store": {name: getattr(store, name) for name in s3_fields},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        "worker": {"hosted_models": ["tiny-wan"]},
        "api": {"poll_first_s": 1, "poll_min_s": 1, "poll_max_s": 1},
    }
    return {**os.environ, "HF_HUB_OFFLINE": "1", **settings_env(settings)}


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def test_api_and_worker_processes_over_redis_and_s3(
    redis_url: str, seaweed, tiny_models_dir: Path, tmp_path: Path
) -> None:
    env = distributed_env(redis_url, seaweed, tiny_models_dir, tmp_path / "data")
    made = genworker(
        "keys", "create", "--project", "acme", "--scope", "generations:write", "--scope", "generations:read", env=env
    )
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("gw_") and "\n" not in key  # the key alone on stdout
    listed = genworker("keys", "list", "--redis-url", redis_url, env=env)
    assert "acme" in listed.stdout and key not in listed.stdout
    key_id = listed.stdout.split("\t")[0]

    port = free_port()
    logs = tmp_path / "logs"
    logs.mkdir()
    api_cmd = [sys.executable, "-m", "genworker.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
    # The children keep their own descriptors of the log files; ours close once they are started.
    with (logs / "api.out").open("wb") as api_out, (logs / "worker.out").open("wb") as worker_out:
        api = subprocess.Popen(api_cmd, env=env, stdout=api_out, stderr=subprocess.STDOUT)
        worker = subprocess.Popen(
            [sys.executable, "-m", "genworker.cli", "worker"], env=env, stdout=worker_out, stderr=subprocess.STDOUT
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_available(base_url, api, "tiny-wan")
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
            assert video["download_url"].startswith(str(seaweed.endpoint))
            downloaded = httpx.get(video["download_url"], timeout=30)
            assert downloaded.status_code == 200
            assert hashlib.sha256(downloaded.content).hexdigest() == video["sha256"]
            again = c.get(f"/v1/generations/{final['id']}").json()["artifacts"][0]
            assert httpx.get(again["download_url"], timeout=30).status_code == 200

            revoked = genworker("keys", "revoke", key_id, "--redis-url", redis_url, env=env)
            assert revoked.returncode == 0, revoked.stderr
            assert_error(c.get(f"/v1/generations/{final['id']}"), 401, "unauthenticated")
    finally:
        assert stop(worker) == 0, (logs / "worker.out").read_text()[-3000:]
        assert stop(api) == 0, (logs / "api.out").read_text()[-3000:]

"""``genworker up`` as a newcomer runs it: one command, then create -> poll -> download -> play.

The real command runs as a subprocess with a temporary data dir (the tiny models come from the
session fixture so they are built once per test run); its worker subprocess runs the tiny model.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import av
import httpx
import psutil
import pytest

from foundation.settings import settings_env
from tests.e2e.conftest import create_body, free_port

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 240  # first import of torch/diffusers in the worker on a cold 2-core machine
JOB_TIMEOUT_S = 240


def wait_until_available(base_url: str, proc: subprocess.Popen[bytes], model: str) -> None:
    """Until /v1/models answers and reports ``model`` hosted by a live worker."""
    deadline = time.monotonic() + START_TIMEOUT_S
    with httpx.Client(base_url=base_url, timeout=5) as c:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"genworker up exited with {proc.returncode}"
            try:
                r = c.get("/v1/models")
            except httpx.TransportError:
                r = None
            if (
                r is not None
                and r.status_code == 200
                and any(m["id"] == model and m["available"] for m in r.json()["data"])
            ):
                return
            time.sleep(0.5)
    raise AssertionError(f"{model} did not become available within {START_TIMEOUT_S} s")


def poll_until_terminal(c: httpx.Client, gid: str) -> dict:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        r = c.get(f"/v1/generations/{gid}")
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("succeeded", "failed", "canceled"):
            assert "Retry-After" not in r.headers
            return r.json()  # type: ignore[no-any-return]
        time.sleep(int(r.headers["Retry-After"]))
    raise AssertionError(f"{gid} did not finish within {JOB_TIMEOUT_S} s")


def test_genworker_up_serves_the_whole_flow(tmp_path: Path, tiny_models_dir: Path) -> None:
    port = free_port()
    data = tmp_path / "var"
    env = {**os.environ, **settings_env({"api": {"poll_first_s": 1, "poll_min_s": 1, "poll_max_s": 1}})}
    cmd = [sys.executable, "-m", "genworker.cli", "up", "--data-dir", str(data), "--port", str(port)]
    cmd += ["--models-dir", str(tiny_models_dir)]
    # stderr (uvicorn's access log) to a file: an unread pipe could fill and stall the server.
    errors = (tmp_path / "up.err").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=errors)
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_until_available(base_url, proc, "tiny-wan")
        key_file = data / "dev-api-key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert workers, "genworker up runs its worker as a subprocess"

        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
            body = create_body(duration_seconds=1)
            created = c.post("/v1/generations", json=body, headers={"Idempotency-Key": "first"})
            assert created.status_code == 202, created.text
            gid = created.json()["id"]
            final = poll_until_terminal(c, gid)
        assert final["status"] == "succeeded", final.get("error")
        video = next(a for a in final["artifacts"] if a["kind"] == "video")
        downloaded = httpx.get(video["download_url"], timeout=30)
        assert downloaded.status_code == 200
        assert hashlib.sha256(downloaded.content).hexdigest() == video["sha256"]
        mp4 = tmp_path / "video.mp4"
        mp4.write_bytes(downloaded.content)
        with av.open(str(mp4)) as container:
            stream = container.streams.video[0]
            frames = sum(1 for _ in container.decode(stream))
            assert (stream.codec_context.width, stream.codec_context.height) == (256, 144)
        assert frames == video["frames"] == 1 * 4  # 1 s at tiny-wan's 4 fps

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        for worker in workers:  # the worker was stopped too, not orphaned
            assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        errors.close()
    out = ""
    if proc.stdout is not None:
        with proc.stdout:
            out = proc.stdout.read().decode()
    assert key in out and f"curl -s {base_url}/v1/generations" in out  # the banner a newcomer pastes from

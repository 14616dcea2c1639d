"""A real embedded service (``genworker up``) for the client tests, on a free loopback port.

One server per test session. Its knobs are set short so the tests can watch the client's rules at
work quickly: signed URLs live 2 s, and the server's ``Retry-After`` is 0 s during a generation's first
2 s and 1 s after that (the spec's 5 s / 10-15 s scaled down). If the server cannot start, every test
that needs it fails with the server's log; none skips.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from foundation.settings import settings_env
from genworker_client import Client, Generation

URL_TTL_S = 2
RETRY_AFTER_EARLY_S = 0  # while a generation is younger than RETRY_AFTER_WINDOW_S
RETRY_AFTER_WINDOW_S = 2
RETRY_AFTER_LATE_S = 1
START_TIMEOUT_S = 180.0  # the worker imports torch and diffusers before its first heartbeat

# Hosted by the embedded worker and quick on CPU.
FAST_MODEL = "tiny-wan"
# In the catalog, so the API accepts it, but hosted by no embedded worker: its generations stay
# queued for as long as a test needs a generation that is not terminal.
NEVER_RUNS_MODEL = "wan2.1-t2v-1.3b"


@dataclass(frozen=True)
class Server:
    base_url: str
    api_key: str
    port: int
    data_dir: Path

    def client(self, **kwargs: object) -> Client:
        return Client(self.base_url, self.api_key, **kwargs)  # type: ignore[arg-type]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _wait_until_ready(proc: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    """Until ``/v1/models`` answers and the fast model has a live worker (its heartbeat arrived)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"genworker up exited with {proc.returncode}:\n{_log_tail(log)}")
        try:
            response = httpx.get(f"{base_url}/models", timeout=2.0)
            models = {m["id"]: m for m in response.json()["data"]}
            if response.status_code == 200 and models.get(FAST_MODEL, {}).get("available"):
                return
            last = f"{response.status_code}, {FAST_MODEL} available={models.get(FAST_MODEL, {}).get('available')}"
        except (httpx.HTTPError, ValueError, KeyError) as e:
            last = repr(e)
        time.sleep(0.25)
    pytest.fail(f"genworker up not ready after {START_TIMEOUT_S:g} s ({last}):\n{_log_tail(log)}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # a second signal stops at once
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# Where docs/quickstart.md serves its image and its webhook receiver (tests/client/test_docs_examples.py).
DOCS_IMAGE_HOST = "127.0.0.1:8765"
DOCS_RECEIVER_HOST = "127.0.0.1:9000"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("client-server")
    port = _free_port()
    executable = shutil.which("genworker", path=str(Path(sys.executable).parent))
    assert executable, "the genworker console script is not installed in this environment"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        **settings_env(
            {
                "store": {"url_ttl_s": URL_TTL_S},
                "api": {
                    "poll_first_s": RETRY_AFTER_EARLY_S,
                    "poll_first_window_s": RETRY_AFTER_WINDOW_S,
                    "poll_min_s": RETRY_AFTER_LATE_S,
                    "poll_max_s": RETRY_AFTER_LATE_S,
                    # A 0 s hint has an SDK poll back to back for RETRY_AFTER_WINDOW_S: hundreds of requests, past
                    # the default budget (60 in 3 s), so the next example's first request was refused 429 whenever
                    # the job outlasted a few polls (a loaded machine). A budget those hints cannot spend.
                    "rate_limit_burst": 100_000,
                    "rate_limit_per_s": 100_000.0,
                    # NEVER_RUNS_MODEL must be accepted: embedded mode refuses unhosted models by default.
                    "unhosted_models": "accept",
                    # The quickstart's image server (section 5b), as the page starts the service.
                    "inputs": {"allow_http_hosts": [DOCS_IMAGE_HOST], "allow_private_hosts": [DOCS_IMAGE_HOST]},
                },
                # The quickstart's webhook receiver (section 6), as the page starts the service.
                "webhooks": {"allowed_hosts": [DOCS_RECEIVER_HOST]},
            }
        ),
    }
    log = data_dir / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [executable, "up", "--port", str(port), "--data-dir", str(data_dir), "--models-dir", str(tiny_models_dir)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_ready(proc, base_url, log)
        key_file = data_dir / "dev-api-key"
        assert key_file.is_file(), f"no {key_file} after start:\n{_log_tail(log)}"
        yield Server(base_url, key_file.read_text().strip(), port, data_dir)
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def finished(server: Server) -> Generation:
    """One succeeded generation of the fast model. Asked for early, it also warms the worker's model
    cache, so later tests that wait at the spec's own cadence see quick jobs."""
    with server.client() as client:
        created = client.create(FAST_MODEL, "a lighthouse at dusk", variant="fast", resolution="144p", seed=7)
        done = client.wait(created, timeout_s=150, first_poll_s=0.5, poll_min_s=0.5, poll_max_s=1.0)
    assert done.status == "succeeded", done.error
    assert done.artifacts, "a succeeded generation must offer artifacts"
    return done

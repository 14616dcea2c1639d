"""Browser tests: the playground in a real Chromium (Debian ``chromium`` + ``chromium-driver``, driven
by Selenium), against a real ``genworker up`` (API + worker subprocess, tiny models).

- ``chrome``: a headless Chromium whose network log (DevTools ``performance`` log) the tests read, to
  grep every response the page received for the key. Missing Chromium fails the test; it never skips.
- ``up``: ``genworker up`` on a free port with a temporary data dir, once per module.
- ``shots``: the directory screenshots go to (``GENWORKER_TEST_ARTIFACTS``, default ``var/test-artifacts``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from foundation.settings import settings_env
from tests.e2e.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("GENWORKER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("GENWORKER_CHROMEDRIVER", "/usr/bin/chromedriver")
START_TIMEOUT_S = 240  # the worker's first import of torch/diffusers on a cold 2-core machine


@dataclass
class Up:
    base_url: str
    key: str
    data_dir: Path
    proc: subprocess.Popen[bytes]


def _wait_until_hosted(base_url: str, proc: subprocess.Popen[bytes], models: set[str], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    with httpx.Client(base_url=base_url, timeout=5) as c:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"genworker up exited with {proc.returncode}:\n{tail}")
            try:
                r = c.get("/v1/models")
                if r.status_code == 200 and models <= {m["id"] for m in r.json()["data"] if m["available"]}:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
    raise AssertionError(f"{models} not hosted within {START_TIMEOUT_S} s")


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[Up]:
    """``genworker up`` as ``make up`` runs it, with 1 s polling hints so the page's polls are quick."""
    tmp = tmp_path_factory.mktemp("up")
    port = free_port()
    data = tmp / "var"
    # A live preview at every step (not once a second), so the page shows the tiny job's few updating in place.
    polls = {"poll_first_s": 1, "poll_min_s": 1, "poll_max_s": 1}
    env = {**os.environ, **settings_env({"api": polls, "worker": {"preview_interval_s": 0}})}
    cmd = [sys.executable, "-m", "genworker.cli", "up", "--data-dir", str(data), "--port", str(port)]
    cmd += ["--models-dir", str(tiny_models_dir)]
    with (tmp / "up.out").open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_until_hosted(base_url, proc, {"tiny-wan", "tiny-ltx2"}, tmp / "up.out")
        yield Up(base_url, (data / "dev-api-key").read_text().strip(), data, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def chrome() -> Iterator[webdriver.Chrome]:
    for path in (CHROMIUM, CHROMEDRIVER):
        assert Path(path).exists(), f"{path} is missing: apt-get install chromium chromium-driver (make deps)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in CI containers
        "--disable-dev-shm-usage",
        "--autoplay-policy=no-user-gesture-required",
        "--window-size=1280,1000",
        "--disable-gpu",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def shots() -> Path:
    root = Path(os.environ.get("GENWORKER_TEST_ARTIFACTS", ROOT / "var" / "test-artifacts")) / "browser"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failed browser test, the page as it was: ``FAILED-<test>.png`` beside the other screenshots."""
    report = yield
    driver = getattr(item, "funcargs", {}).get("chrome")
    shots_dir = getattr(item, "funcargs", {}).get("shots")
    if report.when == "call" and report.failed and driver is not None and shots_dir is not None:
        driver.save_screenshot(str(shots_dir / f"FAILED-{item.name}.png"))
    return report

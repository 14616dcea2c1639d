"""Hostile and heavy input images against a live ``genworker api`` process, its memory read from
``/proc/<pid>/status`` (the peak resident set, reset before each burst through ``/proc/<pid>/clear_refs``):

- a gzip bomb (about 500 MB of zeros in a 486 KB ``Content-Encoding: gzip`` answer) is refused with a
  coded 400 and costs the API no memory: the fetch asks for identity, reads raw bytes and refuses an
  encoding it did not ask for, where it used to inflate about 130 MB per fetch before its cap counted;
- 24 concurrent creates of maximum-size accepted images (16 MP: a PNG, a noisy JPEG and a noisy JPEG to
  turn upright, for the largest generation size offered, LTX-2 at 1080p) are all accepted with the API's
  peak memory at most 500 MB above idle: decodes are bounded per process and made at about the
  generation size. The figure is printed for docs/benchmarks.md.

Real processes and loopback servers only; the measures are memory, not time, so a busy machine slows
the test but does not change its verdict.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from api.api_keys import Scope, SqliteKeyStore
from foundation.settings import settings_env
from tests.e2e.conftest import free_port
from tests.fixtures.image_server import ImageServer, Route, serve_images

MB = 1024 * 1024
BURST = 24
PEAK_BUDGET = 500 * MB  # above idle, for the burst (issue 40)
SIDE = (4_608, 3_456)  # 15.9 MP, under the 16 MP default cap


def _gzip_bomb(zeros: int = 500_000_000) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    chunk = b"\x00" * 1_000_000
    return b"".join(packer.compress(chunk) for _ in range(zeros // len(chunk))) + packer.flush()


def _jpeg(orientation: int) -> bytes:
    """A noisy 16 MP JPEG (noise: many bytes, no cheap decode), with an EXIF orientation."""
    noise = Image.merge("RGB", [Image.effect_noise(SIDE, 60 + 10 * i) for i in range(3)])
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    noise.save(out, format="JPEG", quality=85, exif=exif.tobytes())
    return out.getvalue()


def _png() -> bytes:
    """A 16 MP PNG: decoded whole (no DCT scale for PNG), 64 MB in memory."""
    gradient = Image.linear_gradient("L").resize(SIDE)
    out = io.BytesIO()
    Image.merge("RGB", [gradient, gradient.transpose(Image.Transpose.ROTATE_180), gradient]).save(out, format="PNG")
    return out.getvalue()


@dataclass
class LiveApi:
    base: str
    token: str
    proc: subprocess.Popen[bytes]
    log: Path

    def status_kb(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.proc.pid}/status")

    def reset_peak(self) -> None:
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")  # proc(5): resets VmHWM to VmRSS

    def create(self, url: str) -> httpx.Response:
        body = {
            "model": "ltx-2",
            "mode": "image_to_video",
            "variant": "standard",
            "parameters": {"resolution": "1080p", "ratio": "auto", "duration_seconds": 5},
            "input": {"prompt": "the harbour at dawn", "image_url": url},
        }
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.post(f"{self.base}/v1/generations", json=body, headers=headers, timeout=300)


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    routes = {
        "/bomb.png": Route(_gzip_bomb(), headers={"Content-Type": "image/png", "Content-Encoding": "gzip"}),
        "/big.png": Route(_png()),
        "/big.jpg": Route(_jpeg(orientation=1)),
        "/big-turned.jpg": Route(_jpeg(orientation=6)),
        "/small.png": Route(_small_png()),
    }
    with serve_images(routes) as server:
        yield server


def _small_png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (640, 480), (10, 90, 200)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, images: ImageServer) -> Iterator[LiveApi]:
    data = tmp_path_factory.mktemp("hostile-api")
    port = free_port()
    keys = SqliteKeyStore(data / "keys.db")
    _record, token = keys.create("alpha", [Scope.generations_read, Scope.generations_write])
    keys.close()
    here = f"127.0.0.1:{images.port}"
    settings: dict[str, Any] = {
        "data_dir": str(data),
        "log_level": "WARNING",
        "queue": {"backend": "sqlite", "sqlite_path": str(data / "queue.db")},
        "store": {
            "backend": "local",
            "local_root": str(data / "artifacts"),
            "public_base_url": f"http://127.0.0.1:{port}",
        },
        "api": {
            "keys_backend": "sqlite",
            "unhosted_models": "accept",  # ltx-2 at 1080p: the largest size offered; no worker needed here
            "inputs": {"allow_http_hosts": [here], "allow_private_hosts": [here], "image_wait_s": 300},
        },
    }
    log = data / "api.log"
    cmd = [sys.executable, "-m", "genworker.cli", "api", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env={**os.environ, **settings_env(settings)}, stdout=out, stderr=subprocess.STDOUT)
    live = LiveApi(f"http://127.0.0.1:{port}", token, proc, log)
    try:
        _wait_ready(live)
        # Warm: every decoder and code path once, so idle means "ready to serve", not "not yet imported".
        for path in ("/small.png", "/big.png", "/big.jpg", "/big-turned.jpg"):
            assert live.create(images.url(path)).status_code == 202
        yield live
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _wait_ready(live: LiveApi) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert live.proc.poll() is None, live.log.read_text()[-3000:]
        try:
            if httpx.get(f"{live.base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "API did not start"
        time.sleep(0.2)


def _burst(live: LiveApi, urls: list[str]) -> tuple[list[httpx.Response], int, int]:
    """All ``urls`` created at once; their answers, the idle RSS before and the peak RSS during (bytes)."""
    idle = live.status_kb("VmRSS") * 1024
    live.reset_peak()
    with ThreadPoolExecutor(len(urls)) as pool:
        answers = list(pool.map(live.create, urls))
    return answers, idle, live.status_kb("VmHWM") * 1024


def _report(what: str, idle: int, peak: int) -> None:
    print(f"\n{what}: idle {idle / MB:.0f} MB, peak {peak / MB:.0f} MB, +{(peak - idle) / MB:.0f} MB")


def test_a_gzip_bomb_is_refused_without_inflating(api: LiveApi, images: ImageServer) -> None:
    answers, idle, peak = _burst(api, [images.url("/bomb.png")] * 8)
    _report("8 gzip bombs at once", idle, peak)
    for answer in answers:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "image_fetch_failed"
        assert "encoded (gzip)" in answer.json()["error"]["message"]
    assert peak - idle < 40 * MB  # was about 130 MB per bomb


def test_a_burst_of_maximum_size_images_stays_within_its_memory_bound(api: LiveApi, images: ImageServer) -> None:
    paths = ["/big.png", "/big.jpg", "/big-turned.jpg"] * (BURST // 3)
    answers, idle, peak = _burst(api, [images.url(p) for p in paths])
    _report(f"{BURST} maximum-size images at once", idle, peak)
    assert [a.status_code for a in answers] == [202] * BURST, [a.text for a in answers if a.status_code != 202]
    stored: Callable[[httpx.Response], tuple[int, int]] = lambda a: (  # noqa: E731
        a.json()["input"]["image"]["width"],
        a.json()["input"]["image"]["height"],
    )
    assert stored(answers[0]) == SIDE and stored(answers[1]) == SIDE  # upright: kept as sent
    turned = stored(answers[2])
    assert turned[0] < turned[1] <= SIDE[0] // 2  # turned upright at about the generation size (1280 wide)
    assert peak - idle <= PEAK_BUDGET, f"peak {peak / MB:.0f} MB is more than 500 MB above idle {idle / MB:.0f} MB"

"""The API's image slots are fair by project (issue 47): one project holding 8 ``image_url`` creates to a
host that drips a byte a second takes its share of the fetch slots (half of ``max_concurrent_images``) and
no decode slot, so another project's creates with a ``data:`` image neither wait nor fail.

The audit's case, as a client sees it: alpha's 8 creates to the drip-feed host made 4 of beta's 5 creates
with a small ``data:`` image fail with 503 after ``image_wait_s``, since every fetch held one of the 4
slots that every image needs. Here beta's creates must all be accepted while alpha's fetches still drip.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack, add_keys, start_stack
from tests.fixtures.image_server import ImageServer, Route, serve_images
from tests.image_samples import data_uri, image_bytes
from tests.integration.worker_harness import wait_until

OK = image_bytes(96, 64)
FLOOD = 8
VICTIM = 5
FETCH_TIMEOUT_S = 6.0  # a drip-feed fetch ends here: alpha's slots are held this long
IMAGE_WAIT_S = 2.0


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    with serve_images({"/drip.png": Route(OK, drip_s=1.0)}) as server:  # a byte a second, sized
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, images: ImageServer) -> Iterator[Stack]:
    here = f"127.0.0.1:{images.port}"
    inputs = {
        "allow_http_hosts": [here],
        "allow_private_hosts": [here],
        "fetch_timeout_s": FETCH_TIMEOUT_S,
        "image_wait_s": IMAGE_WAIT_S,  # max_concurrent_images: its default, 4
    }
    s = start_stack(tmp_path_factory.mktemp("api-image-fairness"), api={"inputs": inputs})
    add_keys(s)
    yield s
    s.stop()


def _body(**image: str) -> dict[str, Any]:
    return {
        "model": "tiny-ltx2",
        "mode": "image_to_video",
        "variant": "standard",
        "parameters": {"resolution": "144p", "duration_seconds": 1, "ratio": "16:9"},
        "input": {"prompt": "the lighthouse comes alive", **image},
    }


class Answers:
    """Each create's answer and the moment it came (monotonic), from many threads."""

    def __init__(self) -> None:
        self.got: list[tuple[float, httpx.Response]] = []
        self._lock = threading.Lock()

    def create(self, stack: Stack, token: str, body: dict[str, Any]) -> None:
        with stack.client(token) as c:
            answer = c.post("/v1/generations", json=body, timeout=60)
        with self._lock:
            self.got.append((time.monotonic(), answer))


def test_a_drip_feed_host_of_one_project_does_not_hold_another_projects_images(
    stack: Stack, images: ImageServer
) -> None:
    flood, victim = Answers(), Answers()
    with ThreadPoolExecutor(FLOOD + VICTIM) as pool:
        for _ in range(FLOOD):
            pool.submit(flood.create, stack, "alpha", _body(image_url=images.url("/drip.png")))
        share = max(1, stack.settings.api.inputs.max_concurrent_images // 2)
        wait_until(lambda: images.hits.count("/drip.png") >= share, "alpha's fetches to drip", timeout_s=30)
        done = [pool.submit(victim.create, stack, "beta", _body(image=data_uri(OK))) for _ in range(VICTIM)]
        for future in done:
            future.result()
    first_fetch_end = min(at for at, answer in flood.got if answer.status_code != 503)
    assert [a.status_code for _, a in victim.got] == [202] * VICTIM, [a.text for _, a in victim.got]
    assert max(at for at, _ in victim.got) < first_fetch_end, "beta waited for alpha's fetches to end"
    statuses = sorted(a.status_code for _, a in flood.got)
    # alpha: its share fetched until the time limit (400 image_fetch_failed), the rest waited for it (503).
    assert statuses == [400] * share + [503] * (FLOOD - share), [a.text for _, a in flood.got]
    assert images.hits.count("/drip.png") == share, "a fetch ran past the project's share"

"""The API's bound on input images read and decoded at once (``api.inputs.max_concurrent_images``): a create
that finds every slot taken waits ``api.inputs.image_wait_s`` for one, then is answered 503
``service_unavailable`` with ``Retry-After``, before its image is fetched and with nothing kept; once a slot
frees, creates go through again. A choice the model does not offer is refused before any fetch."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack, add_keys, assert_error, start_stack
from tests.fixtures.image_server import ImageServer, Route, serve_images
from tests.image_samples import image_bytes
from tests.integration.worker_harness import wait_until

OK = image_bytes(96, 64)
HOLD = threading.Event()


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    with serve_images({"/held.png": Route(OK, hold=HOLD), "/ok.png": Route(OK)}) as server:
        yield server
    HOLD.set()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, images: ImageServer) -> Iterator[Stack]:
    here = f"127.0.0.1:{images.port}"
    inputs = {
        "allow_http_hosts": [here],
        "allow_private_hosts": [here],
        "fetch_timeout_s": 60.0,  # the held fetch ends when the test says, not on a clock
        "max_concurrent_images": 1,
        "image_wait_s": 0.3,
    }
    s = start_stack(tmp_path_factory.mktemp("api-image-bounds"), api={"inputs": inputs})
    add_keys(s)
    yield s
    s.stop()


def _body(url: str, resolution: str = "144p") -> dict[str, Any]:
    return {
        "model": "tiny-ltx2",
        "mode": "image_to_video",
        "variant": "standard",
        "parameters": {"resolution": resolution, "duration_seconds": 1, "ratio": "16:9"},
        "input": {"prompt": "the lighthouse comes alive", "image_url": url},
    }


def _create(stack: Stack, url: str, resolution: str = "144p") -> httpx.Response:
    with stack.client("alpha") as c:
        return c.post("/v1/generations", json=_body(url, resolution), timeout=90)


def _kept(stack: Stack) -> tuple[int, int]:
    records, _ = stack.queue.list_jobs("alpha", limit=100)
    return len(records), len(list(stack.store.list_objects("generations/")))


def test_past_the_bound_a_create_waits_then_is_answered_503_with_retry_after(stack: Stack, images: ImageServer) -> None:
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(_create(stack, images.url("/held.png"))))
    first.start()
    try:
        wait_until(lambda: "/held.png" in images.hits, "the first create's fetch to be in flight", timeout_s=30)
        before = _kept(stack)
        busy = _create(stack, images.url("/ok.png"))
        assert_error(busy, 503, "service_unavailable")
        assert busy.headers["Retry-After"] == "1"
        assert "/ok.png" not in images.hits  # refused before its fetch
        assert _kept(stack) == before
    finally:
        HOLD.set()
        first.join(timeout=60)
    assert answers and answers[0].status_code == 202, answers
    assert _create(stack, images.url("/ok.png")).status_code == 202  # the slot is free again


def test_a_choice_the_model_does_not_offer_is_refused_before_the_fetch(stack: Stack, images: ImageServer) -> None:
    hits = len(images.hits)
    assert_error(_create(stack, images.url("/ok.png"), resolution="1080p"), 400, "invalid_parameter")
    assert len(images.hits) == hits

"""docs/errors.md's table of the answers a create can refuse with, held against a running API: every row is
provoked over HTTP and must come back with its status, code and param; a row without a provocation, or a
provocation without a row, fails. And the sentences a newcomer meets first (issue: "the first hour")."""

from __future__ import annotations

import base64
import io
import random
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from api.app import create_app
from api.limits import MemoryLimiter
from api.server import artifacts_app_for
from foundation.queue.base import WorkerHeartbeat
from tests.e2e.conftest import Stack, add_keys, assert_error, create_body, free_port, serve_app, start_stack
from tests.fixtures.image_server import ImageServer, Route, serve_images
from tests.webhooks.test_routes import Api

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
SECTION = "## Every answer a create can refuse with"
MAX_IMAGE_BYTES = 4_000
MAX_BODY_BYTES = 100_000
I2V = "tiny-wan-i2v"  # image_to_video only
LORA_MODEL = "wan2.1-t2v-14b"  # its `distilled` variant needs a LoRA


def table_rows() -> list[tuple[int, str, str]]:
    """(status, code, param) of each row of the section; param ``—`` for none, ``<...>`` for a placeholder."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].isdigit():
            rows.append((int(cells[0]), cells[1].strip("`"), cells[2].strip("`")))
    return rows


def param_matches(cell: str, param: str | None) -> bool:
    if cell == "—":
        return param is None
    pattern = re.escape(cell).replace(re.escape("<"), "<").replace(re.escape(">"), ">")
    return param is not None and re.fullmatch(re.sub(r"<[^>]*>", r"[A-Za-z_.-]+", pattern), param) is not None


def png(size: int) -> bytes:
    """A PNG of noise, ``size`` pixels square (noise does not compress: its bytes grow with its pixels)."""
    image = Image.frombytes("RGB", (size, size), random.Random(size).randbytes(size * size * 3))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def i2v_body(**input_: str) -> dict[str, Any]:
    body = create_body(model=I2V)
    return {**body, "mode": "image_to_video", "input": {"prompt": "a fox", **input_}}


class Provoker:
    """The running API, its image server and one way to provoke each row."""

    def __init__(self, stack: Stack, images: ImageServer, hold: threading.Event, hooked: Api) -> None:
        self.stack = stack
        self.images = images
        self.hold = hold
        self.hooked = hooked  # an API that sends webhooks (``stack`` sends none)

    def post(self, body: object = None, *, token: str | None = "alpha", **kwargs: object) -> httpx.Response:
        with self.stack.client(token) as c:
            if body is not None:
                kwargs["json"] = body
            return c.post("/v1/generations", **kwargs)  # type: ignore[arg-type]

    def rate_limited(self) -> httpx.Response:
        """A second API replica over the same backends, with a per-key budget of one request."""
        s = self.stack
        app = create_app(
            s.settings,
            queue=s.queue,
            store=s.store,
            catalog=s.catalog,
            keys=s.keys,
            limiter=MemoryLimiter(rate_per_s=0.01, burst=1),
            artifacts_app=artifacts_app_for(s.store),
        )
        server, thread = serve_app(app, free_port())
        try:
            port = server.servers[0].sockets[0].getsockname()[1]
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
                auth = {"Authorization": f"Bearer {s.tokens['alpha']}"}
                assert c.post("/v1/generations", json=create_body(), headers=auth).status_code == 202
                return c.post("/v1/generations", json=create_body(), headers=auth)
        finally:
            server.should_exit = True
            thread.join(timeout=15)

    def images_busy(self) -> httpx.Response:
        """One image fetch holds the project's one fetch slot; its next fetch waits past ``image_wait_s``."""
        held = i2v_body(image_url=self.images.url("/hold.png"))
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(self.post, held)
            try:
                while "/hold.png" not in self.images.hits:
                    threading.Event().wait(0.02)
                return self.post(held)
            finally:
                self.hold.set()
                first.result()

    def corrupted_replay(self) -> httpx.Response:
        """A replayed create whose stored record is corrupted: the service's fault, a generic 500."""
        key = {"Idempotency-Key": "corrupted-replay"}
        gid = self.post(create_body(), headers=key).json()["id"]
        with sqlite3.connect(self.stack.settings.queue.sqlite_path) as db:
            db.execute("UPDATE jobs SET record = ? WHERE id = ?", ('{"id": 17, "broken', gid))
        return self.post(create_body(), headers=key)

    def variant_without_weights(self) -> httpx.Response:
        lacking = WorkerHeartbeat(
            worker_id="gpu-lacking",
            hosted_models=[LORA_MODEL],
            ready=True,
            unserved_variants={LORA_MODEL: ["text_to_video/distilled"]},
        )
        self.stack.queue.heartbeat(lacking, ttl_s=60)
        return self.post(create_body(model=LORA_MODEL, resolution="480p") | {"variant": "distilled"})

    def refused_webhook(self) -> httpx.Response:
        with self.hooked.client("alpha") as c:
            return c.post("/v1/generations", json={**create_body(), "webhook_url": "https://169.254.169.254/hook"})

    def queue_full(self) -> httpx.Response:
        """Project beta may have one generation waiting per model; its second is refused."""
        assert self.post(create_body(), token="beta").status_code == 202
        return self.post(create_body(), token="beta")

    def conflict(self) -> httpx.Response:
        key = {"Idempotency-Key": "conflict"}
        assert self.post(create_body(), headers=key).status_code == 202
        return self.post(create_body(prompt="another prompt"), headers=key)


def _without(*names: str) -> dict[str, Any]:
    return {k: v for k, v in create_body().items() if k not in names}


# One provocation per row of the table, keyed as the row is.
PROVOCATIONS: dict[tuple[int, str, str], Callable[[Provoker], httpx.Response]] = {
    (400, "invalid_request", "—"): lambda p: p.post(content=b'{"model": "tiny-wan",'),
    (400, "invalid_request", "Idempotency-Key"): lambda p: p.post(
        create_body(), headers={"Idempotency-Key": "x" * 300}
    ),
    (400, "invalid_parameter", "<query parameter>"): lambda p: p.post(create_body(), params={"debug": "1"}),
    (400, "model_not_found", "model"): lambda p: p.post({**create_body(), "model": "tiny_wan"}),
    (400, "unsupported_mode", "mode"): lambda p: p.post({**create_body(), "mode": "image_to_video"}),
    (400, "unsupported_variant", "variant"): lambda p: p.post({**create_body(), "variant": "turbo"}),
    (400, "invalid_parameter", "<first missing field>"): lambda p: p.post(_without("parameters", "input")),
    (400, "invalid_parameter", "<unknown field>"): lambda p: p.post(create_body(color="red")),
    (400, "invalid_parameter", "parameters.<choice>"): lambda p: p.post(create_body(ratio="16x9")),
    (400, "invalid_parameter", "parameters.<name>"): lambda p: p.post(create_body(seed=2**32)),
    (400, "invalid_parameter", "input.prompt"): lambda p: p.post(create_body(prompt="   ")),
    (400, "invalid_parameter", "input.image"): lambda p: p.post(i2v_body()),
    (400, "unsupported_parameter", "parameters.<name>"): lambda p: p.post(create_body(audio=True)),
    (400, "unsupported_parameter", "input.<image source>"): lambda p: p.post(
        {**create_body(), "input": {"prompt": "a fox", "image_url": "https://example.com/a.png"}}
    ),
    (400, "invalid_parameter", "model"): lambda p: p.post(create_body(model="ltx-2", resolution="480p")),
    (400, "invalid_parameter", "variant"): Provoker.variant_without_weights,
    (400, "invalid_image", "input.<image source>"): lambda p: p.post(i2v_body(image=data_uri(b"not an image"))),
    (400, "image_too_large", "input.<image source>"): lambda p: p.post(i2v_body(image=data_uri(png(64)))),
    (400, "image_url_not_allowed", "input.image_url"): lambda p: p.post(
        i2v_body(image_url="http://169.254.169.254/latest/meta-data")
    ),
    (400, "image_fetch_failed", "input.image_url"): lambda p: p.post(i2v_body(image_url=p.images.url("/gone.png"))),
    (400, "invalid_webhook_url", "webhook_url"): Provoker.refused_webhook,
    (400, "unsupported_parameter", "webhook_url"): lambda p: p.post(
        {**create_body(), "webhook_url": "https://example.com/hook"}
    ),
    (401, "unauthenticated", "Authorization"): lambda p: p.post(create_body(), token=None),
    (403, "insufficient_scope", "—"): lambda p: p.post(create_body(), token="alpha_read"),
    (409, "idempotency_conflict", "Idempotency-Key"): Provoker.conflict,
    (413, "payload_too_large", "—"): lambda p: p.post(content=b" " * (MAX_BODY_BYTES + 1)),
    (429, "rate_limited", "—"): Provoker.rate_limited,
    (429, "queue_full", "—"): Provoker.queue_full,
    (503, "service_unavailable", "—"): Provoker.images_busy,
    (500, "internal_error", "—"): Provoker.corrupted_replay,
}


@pytest.fixture(scope="module")
def provoker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provoker]:
    hold = threading.Event()
    routes = {"/gone.png": Route(b"gone", 404), "/hold.png": Route(png(8), hold=hold)}
    with serve_images(routes) as images:
        allowed = [f"127.0.0.1:{images.port}"]
        inputs = {
            "allow_http_hosts": allowed,
            "allow_private_hosts": allowed,
            "max_image_bytes": MAX_IMAGE_BYTES,
            "max_concurrent_images": 1,
            "image_wait_s": 0.3,
        }
        capped = {"fair": {"projects": {"beta": {"max_queued": 1}}}}  # alpha, the tests' project, has no cap
        stack = start_stack(
            tmp_path_factory.mktemp("api"),
            api={"inputs": inputs, "max_body_bytes": MAX_BODY_BYTES},
            queue_settings=capped,
        )
        add_keys(stack)
        hooked = Api(tmp_path_factory.mktemp("hooked"), {})
        try:
            yield Provoker(stack, images, hold, hooked)
        finally:
            hold.set()
            hooked.stop()
            stack.stop()


def test_the_table_and_the_provocations_are_the_same_rows() -> None:
    rows = table_rows()
    assert len(rows) == len(set(rows)), "a row is listed twice"
    assert set(rows) == set(PROVOCATIONS)


@pytest.mark.parametrize("row", list(PROVOCATIONS), ids=lambda row: f"{row[0]}-{row[1]}-{row[2]}")
def test_each_row_is_what_the_api_answers(provoker: Provoker, row: tuple[int, str, str]) -> None:
    status, code, cell = row
    error = assert_error(PROVOCATIONS[row](provoker), status, code)
    assert param_matches(cell, error["param"]), (cell, error)
    assert "[" not in error["message"], error["message"]  # lists read 16:9, 9:16, never as Python lists


def test_a_malformed_choice_gets_the_sentence_of_an_unsupported_one(provoker: Provoker) -> None:
    malformed = assert_error(provoker.post(create_body(ratio="16x9")), 400, "invalid_parameter", "parameters.ratio")
    unsupported = assert_error(provoker.post(create_body(ratio="21:9")), 400, "invalid_parameter", "parameters.ratio")
    allowed = "allowed: 16:9, 9:16, 1:1, 4:3, 3:4"
    assert malformed["message"] == f"ratio '16x9' is not offered by tiny-wan; {allowed}"
    assert unsupported["message"] == f"ratio '21:9' is not offered by tiny-wan; {allowed}"
    typed = assert_error(provoker.post(create_body(duration_seconds="2")), 400, "invalid_parameter")
    assert typed["message"].endswith("allowed: 1, 2, 3, 4, 5 (numbers, not strings)"), typed


def test_every_missing_field_is_named_in_one_answer(provoker: Provoker) -> None:
    error = assert_error(provoker.post({"input": {"prompt": "a fox"}}), 400, "invalid_parameter", "model")
    assert error["message"] == "fields model, mode, variant, parameters are required"
    error = assert_error(provoker.post({"model": "tiny-wan"}), 400, "invalid_parameter", "parameters")
    assert error["message"] == "fields parameters, input are required"  # mode and variant have defaults


def test_mode_and_variant_default_where_the_catalog_decides(provoker: Provoker) -> None:
    r = provoker.post(_without("mode", "variant"))
    assert r.status_code == 202, r.text
    record = r.json()
    assert (record["mode"], record["variant"]) == ("text_to_video", "standard")
    # Replaying the same body with its defaults spelled out is the same generation, not a conflict.
    key = {"Idempotency-Key": "defaults-replay"}
    first = provoker.post(_without("mode", "variant"), headers=key)
    again = provoker.post(create_body(), headers=key)
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]


def test_a_wrong_model_id_gets_the_closest_and_the_catalog_route(provoker: Provoker) -> None:
    error = assert_error(provoker.post({**create_body(), "model": "tiny_wan"}), 400, "model_not_found", "model")
    assert error["message"].startswith("model 'tiny_wan' is not in the catalog; did you mean tiny-wan")
    assert error["message"].endswith("GET /v1/models lists every model")
    far = assert_error(provoker.post({**create_body(), "model": "qqqq"}), 400, "model_not_found")
    assert far["message"] == "model 'qqqq' is not in the catalog; GET /v1/models lists every model"


def test_cancel_of_an_ended_generation_reads_as_english(provoker: Provoker) -> None:
    with provoker.stack.client("alpha") as c:
        gid = c.post("/v1/generations", json=create_body()).json()["id"]
        assert c.post(f"/v1/generations/{gid}/cancel").status_code == 200
        error = assert_error(c.post(f"/v1/generations/{gid}/cancel"), 409, "not_cancelable", "id")
    assert error["message"] == (
        f"generation '{gid}' has already ended (canceled); only a queued or running one can be canceled"
    )


def test_an_image_url_refusal_says_not_allowed_once(provoker: Provoker) -> None:
    body = i2v_body(image_url="http://169.254.169.254/latest/meta-data")
    error = assert_error(provoker.post(body), 400, "image_url_not_allowed", "input.image_url")
    assert error["message"].count("not allowed") <= 1, error["message"]

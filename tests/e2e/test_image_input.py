"""image_to_video at the API: an input image by data URI or by URL (a loopback server the operator settings
allow), fetched and checked at create, stored under the generation's prefix; every bad input a coded 400
with nothing enqueued and nothing stored (the queue and the store are looked at, not only the answer)."""

from __future__ import annotations

import gzip
import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.api_keys import SqliteKeyStore
from api.app import create_app
from api.errors import FetchFailed, FetchTooLarge, UrlNotAllowed
from api.limits import MemoryLimiter
from api.outbound import OutboundPolicy, fetch
from foundation.core.catalog import load_catalog
from foundation.queue.factory import open_queue
from foundation.settings import Settings
from foundation.stores.s3 import S3Store
from tests.e2e.conftest import Stack, add_keys, assert_error, free_port, serve_app, start_stack
from tests.fixtures.image_server import ImageServer, Route, serve_images
from tests.fixtures.seaweed import SeaweedServer
from tests.image_samples import bomb_png, data_uri, image_bytes

OK = image_bytes(96, 64)
GZIP_BOMB = gzip.compress(b"\x00" * 50_000_000, 9)
OTHER = image_bytes(64, 64, color=(0, 200, 0))
TALL = image_bytes(90, 160, "JPEG")
MAX_BYTES = 300_000
PNG_SIGNATURE = b"\x89PNG"


CLOSED = free_port()  # allowed, but nothing listens there


def inputs(port: int | str) -> dict[str, Any]:
    """The operator's settings for an image server on ``port``: allowed by host and port, nothing wider
    (``"*"``: every port of 127.0.0.1, for a stack other tests share with image servers of their own)."""
    return {
        # localhost: http allowed, its loopback address is not
        "allow_http_hosts": [f"127.0.0.1:{port}", f"localhost:{port}", f"127.0.0.1:{CLOSED}"],
        "allow_private_hosts": [f"127.0.0.1:{port}", f"127.0.0.1:{CLOSED}"],
        "fetch_timeout_s": 1.0,
        "max_image_bytes": MAX_BYTES,
        "max_image_pixels": 1_000_000,
        "max_redirects": 1,
    }


def _routes(port_of: dict[str, int]) -> dict[str, Route]:
    def to(location: str) -> Route:
        return Route(status=302, headers={"Location": location})

    return {
        "/ok.png": Route(OK, headers={"Content-Type": "image/png"}),
        "/other.png": Route(OTHER),
        "/tall.jpg": Route(TALL),
        "/text.png": Route(b"definitely not an image", headers={"Content-Type": "image/png"}),
        "/truncated.png": Route(image_bytes(200, 150)[:300]),
        "/big.png": Route(b"\x89PNG" + b"\x00" * (MAX_BYTES + 10)),
        "/big-unsized.png": Route(b"\x89PNG" + b"\x00" * (MAX_BYTES + 10), sized=False),  # counted while read
        "/bomb.png": Route(bomb_png(20_000, 20_000)),
        "/stall.png": Route(OK, stall_s=3.0),
        "/drip.png": Route(OK, drip_s=0.05),  # every read is quick, the whole body is not
        "/redirect-ok": to("/ok.png"),
        "/redirect-twice": to("/redirect-ok"),
        "/redirect-metadata": to("https://169.254.169.254/latest/meta-data/"),
        "/redirect-localhost": Route(status=302, headers={"Location": f"http://localhost:{port_of['self']}/ok.png"}),
        # 50 MB of zeros in 49 KB: a compression bomb, sent encoded though the fetch asked for identity
        "/gzip-bomb.png": Route(GZIP_BOMB, headers={"Content-Type": "image/png", "Content-Encoding": "gzip"}),
        "/gzip-ok.png": Route(gzip.compress(OK), headers={"Content-Encoding": "gzip"}),  # even a good image
        "/identity-ok.png": Route(OK, headers={"Content-Encoding": "identity"}),
        "/drip-slow.png": Route(OK, drip_s=2.5),  # each byte just inside a 3 s read wait
        "/drip-slow-unsized.png": Route(OK, drip_s=2.5, sized=False),  # its end is the connection's
    }


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    port_of: dict[str, int] = {}
    routes: dict[str, Route] = {}
    with serve_images(routes) as server:
        port_of["self"] = server.port
        routes.update(_routes(port_of))
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, images: ImageServer) -> Iterator[Stack]:
    s = start_stack(tmp_path_factory.mktemp("api-images"), api={"inputs": inputs(images.port)})
    add_keys(s)
    yield s
    s.stop()


def i2v_body(mode: str = "image_to_video", ratio: str = "16:9", **inputs: str) -> dict[str, Any]:
    return {
        "model": "tiny-ltx2",
        "mode": mode,
        "variant": "standard",
        "parameters": {"resolution": "144p", "duration_seconds": 1, "ratio": ratio},
        "input": {"prompt": "the lighthouse comes alive", **inputs},
    }


def _state(stack: Stack) -> tuple[int, int]:
    records, _ = stack.queue.list_jobs("alpha", limit=100)
    return len(records), len(list(stack.store.list_objects("generations/")))


def _refused(stack: Stack, body: dict[str, Any], code: str, param: str) -> str:
    before = _state(stack)
    with stack.client("alpha") as c:
        error = assert_error(c.post("/v1/generations", json=body), 400, code, param)
    assert _state(stack) == before, "a refused create left a record or an object behind"
    return str(error["message"])


@pytest.mark.parametrize(
    ("path", "code", "says"),
    [
        ("/text.png", "invalid_image", "not a JPEG, PNG or WebP"),
        ("/truncated.png", "invalid_image", ""),
        ("/big.png", "image_too_large", "bytes"),
        ("/big-unsized.png", "image_too_large", "bytes"),
        ("/bomb.png", "image_too_large", "pixels"),
        ("/missing.png", "image_fetch_failed", "HTTP 404"),
        ("/stall.png", "image_fetch_failed", "timed out"),
        ("/drip.png", "image_fetch_failed", "timed out"),
        ("/redirect-twice", "image_fetch_failed", "redirects more than 1"),
        ("/redirect-metadata", "image_url_not_allowed", "cloud metadata"),
        ("/redirect-localhost", "image_url_not_allowed", "public addresses only"),  # a name: its class untold
        ("/gzip-bomb.png", "image_fetch_failed", "encoded (gzip)"),
        ("/gzip-ok.png", "image_fetch_failed", "encoded (gzip)"),
    ],
)
def test_bad_image_urls_are_coded_400s_with_nothing_kept(
    stack: Stack, images: ImageServer, path: str, code: str, says: str
) -> None:
    assert says in _refused(stack, i2v_body(image_url=images.url(path)), code, "input.image_url")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://127.0.0.1:{port}/ok.png", ""),  # allowed over http, but https: no TLS there -> fetch failed
        ("http://127.0.0.1:{closed}/ok.png", "cannot connect"),
    ],
)
def test_unreachable_urls_are_image_fetch_failed(stack: Stack, images: ImageServer, url: str, says: str) -> None:
    url = url.format(port=images.port, closed=CLOSED)
    assert says in _refused(stack, i2v_body(image_url=url), "image_fetch_failed", "input.image_url")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://localhost:{port}/ok.png", "public addresses only"),  # a name that resolves to loopback
        ("https://127.0.0.2:{port}/ok.png", "loopback"),
        ("https://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("https://[fd00:ec2::254]/latest/meta-data/", "cloud metadata"),
        ("https://10.0.0.8/a.png", "private"),
        ("http://example.com/a.png", "https"),
        ("file:///etc/passwd", "https"),
    ],
)
def test_urls_to_refused_addresses_are_never_fetched(stack: Stack, images: ImageServer, url: str, says: str) -> None:
    hits = len(images.hits)
    message = _refused(
        stack, i2v_body(image_url=url.format(port=images.port)), "image_url_not_allowed", "input.image_url"
    )
    assert says in message
    assert len(images.hits) == hits


def test_fetches_ask_for_identity_and_read_the_bytes_as_sent(stack: Stack, images: ImageServer) -> None:
    _created(stack, i2v_body(image_url=images.url("/identity-ok.png")))
    assert images.headers[-1]["accept-encoding"] == "identity"


def test_an_allowed_host_is_allowed_on_its_port_only(stack: Stack, images: ImageServer) -> None:
    with serve_images({"/ok.png": Route(OK)}) as other:  # the same host, another port: another service
        message = _refused(stack, i2v_body(image_url=other.url("/ok.png")), "image_url_not_allowed", "input.image_url")
        assert other.hits == []
    assert f"port {other.port}" in message


def test_a_refusal_names_the_rule_not_the_address_a_name_resolves_to(stack: Stack, images: ImageServer) -> None:
    for path in ("/ok.png", "/redirect-localhost"):
        url = images.url(path, host="localhost") if path == "/ok.png" else images.url(path)
        message = _refused(stack, i2v_body(image_url=url), "image_url_not_allowed", "input.image_url")
        assert "public addresses only" in message, message
        assert "loopback" not in message and "127.0.0.1" not in message and "::1" not in message, message


@pytest.mark.parametrize("path", ["/drip-slow.png", "/drip-slow-unsized.png"])
def test_the_fetch_ends_at_its_time_limit_not_at_the_next_byte(images: ImageServer, path: str) -> None:
    """A server that sends one byte just inside each read's wait (one at once, then one every 2.5 s; a read may
    wait 3 s): the whole fetch still ends at its 3 s limit, and a body cut there is a time-out, never a shorter
    image. Without the deadline's watchdog the last read begins at 2.5 s and waits for the byte of 5 s.

    The bounds are the server's schedule, not a tolerance: the end comes no sooner than the limit (load only
    delays it), and before the byte after the limit, sent 2 s later, which a fetch that waits for the read in
    progress always reaches; load fails a sound fetch only by stalling this process for those 2 s."""
    limit_s, drip_s = 3.0, 2.5  # drip_s: the route's
    here = f"127.0.0.1:{images.port}"
    policy = OutboundPolicy(
        allow_http_hosts=frozenset({here}), allow_private_hosts=frozenset({here}), timeout_s=limit_s
    )
    started = time.monotonic()
    with pytest.raises(FetchFailed, match="timed out"):
        fetch(images.url(path), policy)
    elapsed = time.monotonic() - started
    next_byte_s = drip_s * (1 + int(limit_s // drip_s))  # the first byte the server sends after the limit
    assert limit_s <= elapsed < next_byte_s, elapsed


@pytest.mark.parametrize(
    ("image", "code"),
    [
        (data_uri(b"plain text, not an image"), "invalid_image"),
        (data_uri(image_bytes(fmt="GIF"), "image/png"), "invalid_image"),  # the bytes decide, not the label
        ("data:image/gif;base64," + data_uri(OK).split(",")[1], "invalid_image"),
        ("data:image/png;base64,not base64!", "invalid_image"),
        ("https://example.com/a.png", "invalid_image"),  # a URL in the data URI field
        (data_uri(image_bytes(200, 150)[:300]), "invalid_image"),
        (data_uri(bomb_png()), "image_too_large"),
        (data_uri(b"\x89PNG" + b"\x00" * (MAX_BYTES + 10)), "image_too_large"),
    ],
)
def test_bad_data_uris_are_coded_400s_with_nothing_kept(stack: Stack, image: str, code: str) -> None:
    _refused(stack, i2v_body(image=image), code, "input.image")


def test_inputs_must_fit_the_mode(stack: Stack, images: ImageServer) -> None:
    hits = len(images.hits)
    text = i2v_body("text_to_video", image_url=images.url("/ok.png"))
    _refused(stack, text, "unsupported_parameter", "input.image_url")
    _refused(stack, i2v_body(), "invalid_parameter", "input.image")
    both = i2v_body(image_url=images.url("/ok.png"), image=data_uri(OK))
    _refused(stack, both, "invalid_parameter", "input.image")
    assert len(images.hits) == hits  # refused before any fetch


def _created(stack: Stack, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    with stack.client("alpha") as c:
        response = c.post("/v1/generations", json=body, headers=headers)
    assert response.status_code == 202, response.text
    return response


def _check_stored(stack: Stack, generation: dict[str, Any], data: bytes, size: tuple[int, int]) -> None:
    record = stack.queue.get(generation["id"])
    assert record is not None and record.input.image is not None
    stored = record.input.image
    extension = "png" if data.startswith(PNG_SIGNATURE) else "jpg"
    assert stored.key == f"generations/{record.id}/input/image.{extension}"
    assert (stored.sha256, stored.bytes, (stored.width, stored.height)) == (
        hashlib.sha256(data).hexdigest(),
        len(data),
        size,
    )
    assert stack.store.read_bytes(stored.key, max_bytes=len(data) + 1) == data
    assert generation["input"]["image"]["sha256"] == stored.sha256


def test_a_data_uri_and_a_url_are_stored_with_their_hash_and_size(stack: Stack, images: ImageServer) -> None:
    by_uri = _created(stack, i2v_body(image=data_uri(OK))).json()
    _check_stored(stack, by_uri, OK, (96, 64))
    by_url = _created(stack, i2v_body(image_url=images.url("/redirect-ok"))).json()  # one redirect, checked again
    _check_stored(stack, by_url, OK, (96, 64))
    assert by_uri["price_hold"] == by_url["price_hold"] == {"currency": "USD", "amount": "0.02"}  # 1 s, 144p + audio
    with stack.client("beta") as c:  # isolation: another project sees neither
        assert c.get(f"/v1/generations/{by_uri['id']}").status_code == 404


def test_ratio_auto_takes_the_offered_ratio_nearest_the_image(stack: Stack, images: ImageServer) -> None:
    generation = _created(stack, i2v_body(ratio="auto", image_url=images.url("/tall.jpg"))).json()
    assert generation["parameters"]["ratio"] == "9:16"
    _check_stored(stack, generation, TALL, (90, 160))


def test_idempotency_counts_the_image_by_content(stack: Stack, images: ImageServer) -> None:
    first = _created(stack, i2v_body(image=data_uri(OK)), key="i2v-1")
    before = _state(stack)
    replay = _created(stack, i2v_body(image_url=images.url("/ok.png")), key="i2v-1")  # same image, by URL
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json()["id"] == first.json()["id"]
    with stack.client("alpha") as c:
        conflict = c.post(
            "/v1/generations", json=i2v_body(image_url=images.url("/other.png")), headers={"Idempotency-Key": "i2v-1"}
        )
    assert_error(conflict, 409, "idempotency_conflict", "Idempotency-Key")
    assert _state(stack) == before  # neither the replay nor the conflict left an image behind


def test_models_show_the_inputs_of_each_mode(stack: Stack) -> None:
    with stack.client("alpha") as c:
        models = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
    ltx = models["tiny-ltx2"]["modes"]
    assert ltx["text_to_video"]["inputs"] == ["prompt"]
    assert ltx["image_to_video"]["inputs"] == ["prompt", "image"]


def test_redirects_are_not_followed_unless_allowed(images: ImageServer) -> None:
    here = f"127.0.0.1:{images.port}"
    policy = OutboundPolicy(
        allow_http_hosts=frozenset({here, f"localhost:{images.port}"}), allow_private_hosts=frozenset({here})
    )
    with pytest.raises(FetchFailed, match="redirects are not followed"):
        fetch(images.url("/redirect-ok"), policy)
    assert fetch(images.url("/ok.png"), policy).body == OK
    with pytest.raises(UrlNotAllowed, match="public addresses only"):
        fetch(images.url("/ok.png", host="localhost"), policy)
    small = OutboundPolicy(
        allow_http_hosts=policy.allow_http_hosts, allow_private_hosts=policy.allow_private_hosts, max_bytes=MAX_BYTES
    )
    with pytest.raises(FetchTooLarge, match="declares"):  # refused unread
        fetch(images.url("/big.png"), small)
    with pytest.raises(FetchTooLarge, match="larger than"):  # counted while streaming
        fetch(images.url("/big-unsized.png"), small)


# ------------------------------------------------------------------------ distributed: Redis and S3


@pytest.fixture
def fleet_stack(tmp_path: Path, redis_url: str, seaweed: SeaweedServer) -> Iterator[Stack]:
    """The API of the distributed mode: Redis queue and keys, an S3 store (a bucket of its own)."""
    port = free_port()
    settings = Settings(
        data_dir=str(tmp_path),
        queue={"backend": "redis", "redis_url": redis_url, "max_attempts": 2},
        store=seaweed.store_settings(s3_bucket=f"images-{uuid.uuid4().hex[:12]}").model_dump(),
        api={"inputs": inputs("*"), "unhosted_models": "accept"},
    )
    queue = open_queue(settings.queue)
    store = S3Store(settings.store)
    store.ensure_bucket()
    keys = SqliteKeyStore(tmp_path / "keys.db")
    app = create_app(
        settings,
        queue=queue,
        store=store,
        catalog=load_catalog(),
        keys=keys,
        limiter=MemoryLimiter(settings.api.rate_limit_per_s, settings.api.rate_limit_burst),
    )
    server, thread = serve_app(app, port)
    stack = Stack(f"http://127.0.0.1:{port}", settings, queue, store, keys, load_catalog(), server, thread)
    add_keys(stack)
    yield stack
    stack.stop()


def test_the_distributed_api_stores_on_s3_and_refuses_the_same(fleet_stack: Stack, images: ImageServer) -> None:
    by_uri = _created(fleet_stack, i2v_body(image=data_uri(OK))).json()
    _check_stored(fleet_stack, by_uri, OK, (96, 64))
    by_url = _created(fleet_stack, i2v_body(ratio="auto", image_url=images.url("/tall.jpg"))).json()
    _check_stored(fleet_stack, by_url, TALL, (90, 160))
    assert by_url["parameters"]["ratio"] == "9:16"
    _refused(fleet_stack, i2v_body(image_url=images.url("/bomb.png")), "image_too_large", "input.image_url")
    _refused(fleet_stack, i2v_body(image=data_uri(b"GIF89a not really")), "invalid_image", "input.image")

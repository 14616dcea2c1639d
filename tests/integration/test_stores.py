"""One store suite, two backends: a real SeaweedFS (S3) and the local store served over real HTTP.

Downloads always go through the signed URL with httpx, the way a client fetches an artifact.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import pytest
import uvicorn
from pydantic import SecretStr
from starlette.applications import Starlette

from api.artifacts import artifact_app
from foundation.core.errors import BackendUnavailable, ErrorCode, JobError, TransientError
from foundation.stores.base import ArtifactStore, artifact_key
from foundation.stores.config import StoreSettings
from foundation.stores.errors import InvalidKey
from foundation.stores.factory import SECRET_FILE, open_store
from foundation.stores.local import ARTIFACTS_PATH, LocalStore
from foundation.stores.s3 import S3Store
from tests.fixtures.seaweed import SeaweedServer

SECRET = b"local-test-secret-0123456789abcdef"
BIG_BYTES = 17 * 1024 * 1024  # above 16 MiB: two 8 MiB parts and a tail on S3


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="session")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.mp4"
    path.write_bytes(os.urandom(BIG_BYTES))
    return path


@pytest.fixture
def small_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.jpg"
    path.write_bytes(os.urandom(1500))
    return path


@dataclass
class LocalServer:
    root: Path
    base_url: str

    def store(self, secret: bytes = SECRET, ttl_s: int = 900) -> LocalStore:
        return LocalStore(self.root, secret, self.base_url, ttl_s)


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """uvicorn on a free loopback port serving the app the way the API mounts it."""
    root = tmp_path_factory.mktemp("artifacts")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = Starlette()
    app.mount(ARTIFACTS_PATH, artifact_app(LocalStore(root, SECRET, base_url, 900)))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start", pytrace=False)
        time.sleep(0.02)
    yield LocalServer(root, base_url)
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


@dataclass
class Backend:
    name: str
    store: ArtifactStore
    # A store of the same backend whose credentials the server does not accept.
    impostor: Callable[[], ArtifactStore]
    # The same store with another default URL lifetime.
    with_ttl: Callable[[int], ArtifactStore]


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "local":
        server: LocalServer = request.getfixturevalue("local_server")
        return Backend(
            "local",
            server.store(),
            impostor=lambda: server.store(secret=b"another-secret-0123456789abcdef"),
            with_ttl=lambda ttl: server.store(ttl_s=ttl),
        )
    seaweed: SeaweedServer = request.getfixturevalue("seaweed")
    return Backend(
        "s3",
        S3Store(seaweed.store_settings()),
        impostor=lambda: S3Store(seaweed.store_settings(s3_secret_access_key=SecretStr("wrong-secret-key-123"))),
        with_ttl=lambda ttl: S3Store(seaweed.store_settings(url_ttl_s=ttl)),
    )


def fresh_key(filename: str) -> str:
    return artifact_key(f"gen_{uuid.uuid4().hex[:12]}", 1, uuid.uuid4().hex[:12], filename)


def tamper(url: str, param: str) -> str:
    """``url`` with the last character of query parameter ``param`` changed."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    changed = [(k, (v[:-1] + ("0" if v[-1] != "0" else "1")) if k == param else v) for k, v in query]
    assert changed != query, f"{param} not in {url}"
    return urlunsplit(parts._replace(query=urlencode(changed)))


SIG_PARAM = {"local": "sig", "s3": "X-Amz-Signature"}


@pytest.mark.parametrize(("which", "content_type"), [("small", "image/jpeg"), ("big", "video/mp4")])
def test_upload_then_download_through_the_signed_url(
    backend: Backend, small_file: Path, big_file: Path, which: str, content_type: str
) -> None:
    path = small_file if which == "small" else big_file
    data = path.read_bytes()
    key = fresh_key("poster.jpg" if which == "small" else "video.mp4")

    stored = backend.store.put_file(key, path, content_type=content_type, sha256=sha256(data))

    assert (stored.key, stored.bytes, stored.sha256, stored.content_type) == (
        key,
        len(data),
        sha256(data),
        content_type,
    )
    assert backend.store.exists(key)
    signed = backend.store.sign_url(key)
    assert signed.expires_at.timestamp() > time.time() + 60
    response = httpx.get(signed.url, timeout=30)
    assert response.status_code == 200, response.text
    assert sha256(response.content) == sha256(data)
    assert response.headers["content-type"] == content_type
    assert int(response.headers["content-length"]) == len(data)


def test_expired_url_is_refused(backend: Backend, small_file: Path) -> None:
    key = fresh_key("poster.jpg")
    backend.store.put_file(key, small_file, content_type="image/jpeg")
    # Two seconds: SigV4 dates are whole seconds, so a 1 s URL can be only a few ms from expiry.
    short = backend.with_ttl(2).sign_url(key)
    explicit = backend.store.sign_url(key, ttl_s=2)
    assert httpx.get(short.url).status_code == 200
    assert httpx.get(explicit.url).status_code == 200
    time.sleep(3.2)
    assert httpx.get(short.url).status_code == 403
    assert httpx.get(explicit.url).status_code == 403
    assert httpx.get(backend.store.sign_url(key).url).status_code == 200  # a fresh one works


def test_tampered_or_transplanted_signature_is_refused(backend: Backend, small_file: Path) -> None:
    key, other = fresh_key("poster.jpg"), fresh_key("poster.jpg")
    for k in (key, other):
        backend.store.put_file(k, small_file, content_type="image/jpeg")
    url = backend.store.sign_url(key).url
    assert httpx.get(url).status_code == 200
    assert httpx.get(tamper(url, SIG_PARAM[backend.name])).status_code == 403
    # The signature of one key does not open another.
    assert httpx.get(url.replace(key, other)).status_code == 403


def test_wrong_credentials_are_refused(backend: Backend, small_file: Path) -> None:
    key = fresh_key("poster.jpg")
    backend.store.put_file(key, small_file, content_type="image/jpeg")
    impostor = backend.impostor()
    assert httpx.get(impostor.sign_url(key).url).status_code == 403
    if backend.name == "s3":
        with pytest.raises(JobError) as info:
            impostor.put_file(fresh_key("x.jpg"), small_file, content_type="image/jpeg")
        assert info.value.code is ErrorCode.upload_failed
        assert "SignatureDoesNotMatch" in info.value.message


def test_checksum_mismatch_stores_nothing(backend: Backend, small_file: Path) -> None:
    key = fresh_key("poster.jpg")
    with pytest.raises(TransientError) as info:
        backend.store.put_file(key, small_file, content_type="image/jpeg", sha256="0" * 64)
    assert info.value.code is ErrorCode.upload_failed
    assert not backend.store.exists(key)


def test_read_bytes_returns_a_bounded_prefix_or_none(backend: Backend, small_file: Path) -> None:
    """What a worker reads an input image with: the whole object when asked for more, a bounded prefix
    otherwise (an oversized object cannot flood the worker), None for a missing key."""
    key = fresh_key("input.png")
    data = small_file.read_bytes()
    backend.store.put_file(key, small_file, content_type="image/png")
    assert backend.store.read_bytes(key, max_bytes=len(data) + 1) == data
    assert backend.store.read_bytes(key, max_bytes=10) == data[:10]
    assert backend.store.read_bytes(fresh_key("input.png"), max_bytes=10) is None


def test_delete_removes_the_object(backend: Backend, small_file: Path) -> None:
    key = fresh_key("poster.jpg")
    backend.store.put_file(key, small_file, content_type="image/jpeg")
    backend.store.delete(key)
    assert not backend.store.exists(key)
    assert httpx.get(backend.store.sign_url(key).url).status_code == 404
    backend.store.delete(key)  # deleting twice is fine


def test_unreachable_s3_is_transient(small_file: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = StoreSettings(
        backend="s3",
        s3_endpoint_url=f"http://127.0.0.1:{port}",
        s3_access_key_id=SecretStr("ak"),
        s3_secret_access_key=SecretStr("sk"),
        s3_max_attempts=2,
        s3_connect_timeout_s=1,
    )
    with pytest.raises(TransientError) as info:
        S3Store(settings).put_file("k/poster.jpg", small_file, content_type="image/jpeg")
    assert info.value.code is ErrorCode.upload_failed
    assert isinstance(info.value, BackendUnavailable)  # no answer at all: the API would say 503
    for call in (lambda s: s.exists("k/poster.jpg"), lambda s: s.delete("k/poster.jpg"), S3Store.ensure_bucket):
        with pytest.raises(BackendUnavailable) as info:
            call(S3Store(settings))
        assert info.value.code is ErrorCode.upload_failed and info.value.__cause__ is not None


def test_ensure_bucket_creates_a_private_bucket(seaweed: SeaweedServer, small_file: Path) -> None:
    bucket = f"ensure-{uuid.uuid4().hex[:8]}"
    store = S3Store(seaweed.store_settings(s3_bucket=bucket))
    store.ensure_bucket()
    store.ensure_bucket()  # idempotent
    store.put_file("a/poster.jpg", small_file, content_type="image/jpeg")
    anonymous = httpx.get(f"{seaweed.endpoint}/{bucket}/a/poster.jpg")
    assert anonymous.status_code == 403
    assert httpx.get(store.sign_url("a/poster.jpg").url).status_code == 200


# ---------------------------------------------------------------------------------------------------
# Local store only: key confinement, atomic layout, the HTTP handler's ranges and errors


@pytest.mark.parametrize(
    "key", ["../escape.mp4", "a/../../escape.mp4", "/etc/passwd", "a\\b.mp4", "a//b.mp4", "a/./b", "", "a/b\x00.mp4"]
)
def test_local_store_refuses_keys_outside_its_root(local_server: LocalServer, small_file: Path, key: str) -> None:
    store = local_server.store()
    with pytest.raises(JobError) as info:
        store.put_file(key, small_file, content_type="image/jpeg")
    assert info.value.code is ErrorCode.upload_failed
    with pytest.raises(InvalidKey):
        store.sign_url(key)
    assert not (local_server.root.parent / "escape.mp4").exists()


def test_local_store_file_system_errors_are_transient(local_server: LocalServer, small_file: Path) -> None:
    """An OSError leaves the store as ``TransientError(upload_failed)`` with the OSError as its cause."""
    store = local_server.store()
    key = fresh_key("poster.jpg")
    store.put_file(key, small_file, content_type="image/jpeg")
    directory = key.rsplit("/", 1)[0]  # unlinking a directory fails whoever runs the test (root too)
    with pytest.raises(TransientError) as info:
        store.delete(directory)
    assert info.value.code is ErrorCode.upload_failed
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(TransientError) as info:
        store.put_file(fresh_key("x.jpg"), small_file.with_name("missing.jpg"), content_type="image/jpeg")
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_local_store_writes_atomically_into_the_key_path(local_server: LocalServer, big_file: Path) -> None:
    store = local_server.store()
    key = fresh_key("video.mp4")
    store.put_file(key, big_file, content_type="video/mp4")
    target = local_server.root / key
    assert target.read_bytes() == big_file.read_bytes()
    assert [p.name for p in target.parent.iterdir()] == ["video.mp4"]  # no temp file left behind


@pytest.fixture
def served(local_server: LocalServer, tmp_path: Path) -> tuple[LocalStore, str, bytes]:
    store = local_server.store()
    data = os.urandom(1000)
    source = tmp_path / "video.mp4"
    source.write_bytes(data)
    key = fresh_key("video.mp4")
    store.put_file(key, source, content_type="video/mp4")
    return store, key, data


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [("bytes=0-99", 0, 99), ("bytes=900-", 900, 999), ("bytes=-10", 990, 999), ("bytes=500-5000", 500, 999)],
)
def test_local_http_serves_byte_ranges(
    served: tuple[LocalStore, str, bytes], header: str, start: int, end: int
) -> None:
    store, key, data = served
    response = httpx.get(store.sign_url(key).url, headers={"Range": header})
    assert response.status_code == 206
    assert response.headers["content-range"] == f"bytes {start}-{end}/{len(data)}"
    assert int(response.headers["content-length"]) == end - start + 1
    assert response.content == data[start : end + 1]


def test_local_http_whole_file_headers_and_head(served: tuple[LocalStore, str, bytes]) -> None:
    store, key, data = served
    url = store.sign_url(key).url
    response = httpx.get(url)
    assert response.status_code == 200
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["content-type"] == "video/mp4"
    assert response.content == data
    head = httpx.head(url)
    assert head.status_code == 200
    assert int(head.headers["content-length"]) == len(data)
    assert head.content == b""


def test_local_http_unsatisfiable_range_is_416(served: tuple[LocalStore, str, bytes]) -> None:
    store, key, data = served
    response = httpx.get(store.sign_url(key).url, headers={"Range": f"bytes={len(data)}-"})
    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{len(data)}"
    assert response.json()["error"]["code"] == "invalid_request"


def test_local_http_error_shapes(local_server: LocalServer, served: tuple[LocalStore, str, bytes]) -> None:
    store, key, _ = served
    base = f"{local_server.base_url}{ARTIFACTS_PATH}/{key}"
    unsigned = httpx.get(base)
    assert unsigned.status_code == 403
    assert unsigned.json() == {
        "error": {"code": "invalid_request", "message": unsigned.json()["error"]["message"], "param": "sig"}
    }
    missing = httpx.get(store.sign_url(fresh_key("video.mp4")).url)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    post = httpx.post(store.sign_url(key).url)
    assert post.status_code == 405
    assert post.json()["error"]["code"] == "method_not_allowed"


# ---------------------------------------------------------------------------------------------------
# Factory


def test_open_store_local_shares_one_generated_secret(tmp_path: Path, small_file: Path) -> None:
    settings = StoreSettings(backend="local", local_root="artifacts")
    api_side, worker_side = open_store(settings, data_dir=tmp_path), open_store(settings, data_dir=tmp_path)
    assert isinstance(api_side, LocalStore) and isinstance(worker_side, LocalStore)
    assert api_side.root == (tmp_path / "artifacts").resolve()
    secret_file = tmp_path / SECRET_FILE
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    worker_side.put_file("g/1/poster.jpg", small_file, content_type="image/jpeg")
    url = urlsplit(api_side.sign_url("g/1/poster.jpg").url)
    query = dict(parse_qsl(url.query))
    assert worker_side.verify("g/1/poster.jpg", query["expires"], query["sig"])


def test_open_store_uses_configured_secret_and_absolute_root(tmp_path: Path) -> None:
    root = tmp_path / "elsewhere"
    settings = StoreSettings(local_root=str(root), signing_secret=SecretStr("configured-secret-0123456789"))
    store = open_store(settings, data_dir=tmp_path / "data")
    assert isinstance(store, LocalStore)
    assert store.root == root.resolve()
    assert not (tmp_path / "data" / SECRET_FILE).exists()
    reference = LocalStore(root, b"configured-secret-0123456789", "http://x", 60)
    assert store.signature("k", 1) == reference.signature("k", 1)


def test_open_store_s3(seaweed: SeaweedServer) -> None:
    assert isinstance(open_store(seaweed.store_settings(), data_dir="unused"), S3Store)

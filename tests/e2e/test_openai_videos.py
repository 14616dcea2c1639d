"""``/v1/videos`` driven by the official ``openai`` package, as a user pointing it at genworker would.

A real API (uvicorn on loopback, SQLite queue, local artifact store) with a real ``genworker worker`` process
hosting ``tiny-wan``: videos are created, polled with the SDK's own loop, downloaded (MP4 and thumbnail),
listed, deleted, and every error arrives as the SDK's typed exception. ``tiny-ltx2`` and ``tiny-wan-ti2v``
are accepted but hosted by no worker here, so their videos stay queued for the tests that need a video that
has not ended. A vLLM-Omni-style create goes through ``curl -F``, as its docs show it. Last, the distributed
layout (Redis queue, S3 store on SeaweedFS), where the content route redirects to a signed S3 URL; there the
test is the worker (claim, upload, finish), as tests/e2e/test_events_stream.py does.

The SDK marks its Videos methods deprecated (OpenAI's own Sora service closes); the warning is about
OpenAI's service, not this one, and is ignored here by its text.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import openai
import pytest
from PIL import Image

from api.api_keys import SqliteKeyStore
from api.app import create_app
from foundation.core.catalog import load_catalog
from foundation.core.contract import Artifact, Status
from foundation.queue.base import Outcome
from foundation.queue.factory import open_queue
from foundation.settings import Settings, settings_env
from foundation.stores.base import artifact_key, artifact_prefix
from foundation.stores.s3 import S3Store
from tests.e2e.conftest import READ, WRITE, Stack, add_keys, free_port, serve_app, start_stack
from tests.fixtures.seaweed import SeaweedServer
from tests.integration.worker_harness import WorkerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The Sora API is scheduled:DeprecationWarning"),
]

QUEUED_MODEL = "tiny-ltx2"  # accepted, hosted by no worker here: its videos stay queued


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("videos")
    s = start_stack(tmp / "api", api={"unhosted_models": "accept"})
    add_keys(s)
    env = settings_env(
        {
            "data_dir": s.settings.data_dir,
            "queue": {"backend": "sqlite", "sqlite_path": s.settings.queue.sqlite_path},
            "store": {"backend": "local", "local_root": s.settings.store.local_root},
            "models": {"tiny_models_dir": str(tiny_models_dir)},
            "worker": {"hosted_models": ["tiny-wan"], "preload": ["tiny-wan"], "heartbeat_s": 1, "drain_grace_s": 1},
        }
    ) | {"HF_HUB_OFFLINE": "1"}
    worker = WorkerProcess(env, tmp / "worker.log").start()
    try:
        worker.wait_ready()
        yield s
    finally:
        worker.stop()
        s.stop()


SDK = Callable[..., openai.OpenAI]


@pytest.fixture
def sdk() -> Iterator[SDK]:
    """``sdk(stack, token="alpha")``: the SDK pointed at a stack, without retries (each call is one request);
    every client made is closed after the test (its connection pool would leak sockets)."""
    made: list[openai.OpenAI] = []

    def make(stack: Stack, token: str = "alpha", *, api_key: str | None = None) -> openai.OpenAI:
        client = openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key=api_key or stack.tokens[token], max_retries=0)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def generation(stack: Stack, video_id: str) -> dict[str, Any]:
    with stack.client("alpha") as c:
        r = c.get(f"/v1/generations/{video_id}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def curl_create(stack: Stack, *form: str) -> dict[str, Any]:
    """``POST /v1/videos`` by ``curl -F`` (each ``form`` item is one ``-F`` value); the answer's JSON."""
    args = ["curl", "-sS", "--fail-with-body", f"{stack.base_url}/v1/videos"]
    args += ["-H", f"Authorization: Bearer {stack.tokens['alpha']}"]
    for field in form:
        args += ["-F", field]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_create_poll_and_download_the_video_and_its_thumbnail(stack: Stack, sdk: SDK) -> None:
    client = sdk(stack)
    created = client.videos.create(
        model="tiny-wan", prompt="a red fox running through snow", seconds="1", size="256x144"
    )
    assert (created.object, created.status, created.progress) == ("video", "queued", 0)
    assert (created.model, created.seconds, created.size) == ("tiny-wan", "1", "256x144")
    video = client.videos.poll(created.id)  # the SDK's own loop, paced by the server's openai-poll-after-ms
    assert video.status == "completed", video.error
    assert video.progress == 100 and video.error is None
    assert video.completed_at is not None and video.expires_at is not None
    assert video.created_at <= video.completed_at < video.expires_at

    # The same generation, on the service's own surface.
    record = generation(stack, video.id)
    assert (record["status"], record["mode"], record["variant"]) == ("succeeded", "text_to_video", "standard")
    params = record["parameters"]
    assert (params["resolution"], params["ratio"], params["duration_seconds"]) == ("144p", "16:9", 1)
    artifacts = {a["kind"]: a for a in record["artifacts"]}

    mp4 = client.videos.download_content(video.id)
    assert mp4.response.headers["content-type"] == "video/mp4"
    assert hashlib.sha256(mp4.content).hexdigest() == artifacts["video"]["sha256"]
    with av.open(io.BytesIO(mp4.content)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.width, stream.codec_context.height) == (256, 144)
        assert sum(1 for _ in container.decode(stream)) == 4  # 1 s at tiny-wan's 4 fps
    thumbnail = client.videos.download_content(video.id, variant="thumbnail")
    assert thumbnail.response.headers["content-type"] == "image/jpeg"
    assert hashlib.sha256(thumbnail.content).hexdigest() == artifacts["poster"]["sha256"]
    assert Image.open(io.BytesIO(thumbnail.content)).size == (256, 144)


def test_create_and_poll(stack: Stack, sdk: SDK) -> None:
    video = sdk(stack).videos.create_and_poll(
        model="tiny-wan", prompt="a paper boat", seconds="1", poll_interval_ms=200
    )
    assert (video.status, video.progress, video.seconds) == ("completed", 100, "1")
    assert generation(stack, video.id)["status"] == "succeeded"


def test_the_idempotency_key_replays_the_create_on_both_surfaces(stack: Stack, sdk: SDK) -> None:
    client = sdk(stack)
    key = {"Idempotency-Key": "boat-001"}
    first = client.videos.with_raw_response.create(model=QUEUED_MODEL, prompt="a boat", seconds="1", extra_headers=key)
    again = client.videos.with_raw_response.create(model=QUEUED_MODEL, prompt="a boat", seconds="1", extra_headers=key)
    video_id = first.parse().id
    assert again.parse().id == video_id and again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    # The same create in the service's own words, with the same key: the same generation.
    body = {
        "model": QUEUED_MODEL,
        "mode": "text_to_video",
        "variant": "standard",
        "parameters": {"duration_seconds": 1},
        "input": {"prompt": "a boat"},
    }
    with stack.client("alpha") as c:
        replayed = c.post("/v1/generations", json=body, headers=key)
    assert replayed.status_code == 202 and replayed.json()["id"] == video_id
    with pytest.raises(openai.ConflictError) as conflict:
        client.videos.create(model=QUEUED_MODEL, prompt="a plane", seconds="1", extra_headers=key)
    assert conflict.value.code == "idempotency_conflict" and conflict.value.param == "Idempotency-Key"
    assert conflict.value.response.headers["x-should-retry"] == "false"  # the SDK would retry a plain 409


def test_list_pages_with_after_limit_and_order(stack: Stack, sdk: SDK) -> None:
    _, token = stack.keys.create("videos-lister", [READ, WRITE])
    stack.tokens["lister"] = token
    client = sdk(stack, "lister")
    ids = [client.videos.create(model=QUEUED_MODEL, prompt=f"clip {i}", seconds="1").id for i in range(3)]
    page = client.videos.list(limit=2)
    assert [v.id for v in page.data] == [ids[2], ids[1]]
    assert page.has_more and page.last_id == ids[1]
    assert [v.id for v in client.videos.list(limit=2)] == ids[::-1]  # the SDK follows last_id as after
    assert [v.id for v in client.videos.list(limit=2, order="asc")] == ids
    assert [v.id for v in client.videos.list(after=ids[0], order="asc")] == ids[1:]
    last = client.videos.list(after=ids[1])
    assert [v.id for v in last.data] == [ids[0]] and not last.has_more
    with pytest.raises(openai.BadRequestError) as unknown:
        client.videos.list(after="gen_nope")
    assert unknown.value.param == "after"


def test_delete_removes_the_files_and_then_the_id_is_not_found(stack: Stack, sdk: SDK) -> None:
    client = sdk(stack)
    video = client.videos.create_and_poll(model="tiny-wan", prompt="a lantern", seconds="1", poll_interval_ms=200)
    assert video.status == "completed", video.error
    prefix = artifact_prefix(video.id)
    assert list(stack.store.list_objects(prefix))
    deleted = client.videos.delete(video.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (video.id, "video.deleted", True)
    assert list(stack.store.list_objects(prefix)) == []
    for gone in (
        lambda: client.videos.retrieve(video.id),
        lambda: client.videos.download_content(video.id),
        lambda: client.videos.delete(video.id),
    ):
        with pytest.raises(openai.NotFoundError):
            gone()
    with stack.client("alpha") as c:
        assert c.get(f"/v1/generations/{video.id}").status_code == 404
    assert video.id not in [v.id for v in client.videos.list(limit=100)]


def test_another_project_finds_no_video_on_any_route_and_changes_nothing(stack: Stack, sdk: SDK) -> None:
    """Every ``/v1/videos/{id}`` route answers another project's id as not found, never forbidden (which would say
    it exists), and leaves the video whole: retrieve, both contents, delete, the list; the owner's after."""
    owner = sdk(stack)
    video = owner.videos.create_and_poll(model="tiny-wan", prompt="a kite", seconds="1", poll_interval_ms=200)
    assert video.status == "completed", video.error
    stranger = sdk(stack, "beta")
    for route, attempt in {
        "retrieve": lambda: stranger.videos.retrieve(video.id),
        "content": lambda: stranger.videos.download_content(video.id),
        "thumbnail": lambda: stranger.videos.download_content(video.id, variant="thumbnail"),
        "delete": lambda: stranger.videos.delete(video.id),
    }.items():
        with pytest.raises(openai.NotFoundError) as refused:
            attempt()
        assert refused.value.code == "not_found", route
    assert video.id not in [v.id for v in stranger.videos.list(limit=100)]
    # Nothing was deleted or changed: the owner still retrieves and downloads it.
    assert list(stack.store.list_objects(artifact_prefix(video.id)))
    assert owner.videos.retrieve(video.id).status == "completed"
    record = generation(stack, video.id)
    mp4 = owner.videos.download_content(video.id)
    video_sha = next(a["sha256"] for a in record["artifacts"] if a["kind"] == "video")
    assert hashlib.sha256(mp4.content).hexdigest() == video_sha


def test_an_uploaded_image_makes_an_image_to_video_that_deletes_once_canceled(
    stack: Stack, tmp_path: Path, sdk: SDK
) -> None:
    frame = tmp_path / "frame.png"
    Image.new("RGB", (240, 320), (200, 120, 40)).save(frame)  # portrait
    made = curl_create(
        stack, "model=tiny-wan-ti2v", "prompt=the frame comes alive", "seconds=1", f"input_reference=@{frame}"
    )
    assert (made["status"], made["size"]) == ("queued", "144x256")  # no size: the offered ratio nearest the image
    record = generation(stack, made["id"])
    assert (record["mode"], record["parameters"]["ratio"]) == ("image_to_video", "9:16")
    assert record["input"]["image"]["sha256"] == hashlib.sha256(frame.read_bytes()).hexdigest()
    prefix = artifact_prefix(made["id"])
    assert [o.key for o in stack.store.list_objects(prefix)] == [record["input"]["image"]["key"]]

    client = sdk(stack)
    with pytest.raises(openai.ConflictError) as running:
        client.videos.delete(made["id"])
    assert running.value.code == "not_deletable"
    with pytest.raises(openai.NotFoundError):
        client.videos.download_content(made["id"])  # no content before it is completed
    with stack.client("alpha") as c:
        assert c.post(f"/v1/generations/{made['id']}/cancel").status_code == 200
    canceled = client.videos.retrieve(made["id"])
    assert canceled.status == "failed" and canceled.error is not None and canceled.error.code == "canceled"
    assert client.videos.delete(made["id"]).deleted
    assert list(stack.store.list_objects(prefix)) == []


def test_an_upload_may_be_as_large_as_an_image_and_no_larger(stack: Stack, tmp_path: Path) -> None:
    """The create's body limit (1 MB) is raised on this route alone, by ``api.inputs.max_image_bytes``: a 3 MB
    photo-sized PNG is accepted; a body past the image limit is refused before it is read whole."""
    frame = tmp_path / "noisy.png"
    noise = np.random.default_rng(0).integers(0, 256, (1024, 1024, 3), dtype=np.uint8)
    Image.fromarray(noise).save(frame)
    assert frame.stat().st_size > 3_000_000 > stack.settings.api.max_body_bytes
    made = curl_create(stack, f"model={QUEUED_MODEL}", "prompt=a noisy frame", "seconds=1", f"input_reference=@{frame}")
    assert made["status"] == "queued"
    limit = stack.settings.api.inputs.max_image_bytes + stack.settings.api.max_body_bytes
    with stack.client("alpha") as c:
        refused = c.post("/v1/videos", content=b"x" * (limit + 1), headers={"content-type": "multipart/form-data"})
        assert refused.status_code == 413 and refused.json()["error"]["code"] == "payload_too_large"
        other = c.post("/v1/generations", content=b"x" * 3_000_000, headers={"content-type": "application/json"})
        assert other.status_code == 413  # the other routes keep api.max_body_bytes


def test_a_vllm_omni_style_multipart_create_with_num_frames_and_fps(stack: Stack, sdk: SDK) -> None:
    made = curl_create(
        stack,
        "model=tiny-wan",
        "prompt=a lighthouse in a storm",
        "num_frames=9",  # what Wan generates for 2 s at 4 fps (4k+1); the MP4 keeps 8
        "fps=4",
        "width=432",
        "height=240",
        "num_inference_steps=2",
        "guidance_scale=1.0",
        "seed=7",
        "negative_prompt=blurry",
    )
    assert (made["seconds"], made["size"]) == ("2", "432x240")
    record = generation(stack, made["id"])
    assert record["variant"] == "fast"  # tiny-wan's recipe with 2 steps and guidance 1.0
    params = record["parameters"]
    assert (params["resolution"], params["ratio"], params["duration_seconds"]) == ("240p", "16:9", 2)
    assert (params["seed"], params["negative_prompt"]) == (7, "blurry")
    video = sdk(stack).videos.poll(made["id"], poll_interval_ms=200)
    assert video.status == "completed", video.error
    frames = {a["kind"]: a for a in generation(stack, made["id"])["artifacts"]}["video"]["frames"]
    assert frames == 8


def test_a_json_create_with_the_image_by_data_uri(stack: Stack) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (256, 144), (10, 90, 200)).save(buffer, format="PNG")
    data_uri = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    body = {"model": "tiny-wan-ti2v", "prompt": "waves", "seconds": 1, "input_reference": {"image_url": data_uri}}
    with stack.client("alpha") as c:
        made = c.post("/v1/videos", json=body)
    assert made.status_code == 200, made.text
    assert made.json()["size"] == "256x144"
    record = generation(stack, made.json()["id"])
    assert record["input"]["image"]["sha256"] == hashlib.sha256(buffer.getvalue()).hexdigest()


def test_each_failure_is_the_sdks_typed_exception_with_the_code(stack: Stack, sdk: SDK) -> None:
    client = sdk(stack)
    with pytest.raises(openai.BadRequestError) as size:
        client.videos.create(model="tiny-wan", prompt="x", size="1280x720")
    assert (size.value.code, size.value.param, size.value.type) == (
        "invalid_parameter",
        "size",
        "invalid_request_error",
    )
    assert "offered sizes: 256x144" in size.value.message
    with pytest.raises(openai.BadRequestError) as unknown:
        client.videos.create(model="tiny-wan", prompt="x", extra_body={"guidance_scale_2": "3"})
    assert (unknown.value.code, unknown.value.param) == ("unsupported_parameter", "guidance_scale_2")
    with pytest.raises(openai.BadRequestError) as model:
        client.videos.create(model="sora-2", prompt="x")
    assert model.value.code == "model_not_found"
    existing = client.videos.create(model=QUEUED_MODEL, prompt="x", seconds="1")
    with pytest.raises(openai.BadRequestError) as remix:
        client.videos.remix(existing.id, prompt="again")
    assert remix.value.code == "unsupported_mode" and "not supported by this model" in remix.value.message
    with pytest.raises(openai.BadRequestError) as edit:
        # (The SDK 3.57 cannot send its {"id": ...} reference form in multipart; a file it can.)
        client.videos.edit(prompt="again", video=("clip.mp4", b"\x00" * 16, "video/mp4"))
    assert edit.value.code == "unsupported_mode"
    with pytest.raises(openai.BadRequestError) as variant:
        client.videos.download_content(existing.id, variant="spritesheet")
    assert variant.value.param == "variant"

    with pytest.raises(openai.AuthenticationError) as key:
        sdk(stack, api_key="gw_not_a_key").videos.list()
    assert (key.value.code, key.value.type) == ("unauthenticated", "authentication_error")
    with pytest.raises(openai.PermissionDeniedError) as scope:
        sdk(stack, "alpha_read").videos.create(model="tiny-wan", prompt="x")
    assert scope.value.code == "insufficient_scope"
    with pytest.raises(openai.NotFoundError) as other_project:
        sdk(stack, "beta").videos.retrieve(existing.id)  # another project's id is not found, never forbidden
    assert other_project.value.code == "not_found"


def test_malformed_creates_are_coded_400s_and_store_nothing(stack: Stack) -> None:
    png = io.BytesIO()
    Image.new("RGB", (64, 48)).save(png, format="PNG")
    image = ("frame.png", png.getvalue(), "image/png")
    fields = {"model": "tiny-wan-ti2v", "prompt": "x"}
    cases: list[tuple[dict[str, Any], str, str | None]] = [
        ({"content": b"model=tiny-wan", "headers": {"Content-Type": "text/plain"}}, "invalid_request", "Content-Type"),
        ({"content": b"{not json", "headers": {"Content-Type": "application/json"}}, "invalid_request", None),
        ({"json": ["tiny-wan", "x"]}, "invalid_request", None),
        (
            {"content": b"--b\r\nbroken", "headers": {"Content-Type": "multipart/form-data; boundary=b"}},
            "invalid_parameter",  # a body cut short reads as no fields: prompt is missing
            "prompt",
        ),
        ({"data": {"model": ["tiny-wan", "tiny-ltx2"], "prompt": "x"}}, "invalid_parameter", "model"),
        ({"data": {"prompt": "x"}, "files": {"model": ("model.txt", b"tiny-wan")}}, "invalid_parameter", "model"),
        ({"data": fields | {"input_reference": "https://example.com/a.png"}}, "invalid_parameter", "input_reference"),
        ({"data": fields, "files": [("input_reference", image), ("input_reference", image)]}, "invalid_request", None),
        (
            {"data": fields, "files": {"input_reference": ("a.png", b"not an image", "image/png")}},
            "invalid_image",
            "input_reference",
        ),
        ({"data": fields | {"input_reference[file_id]": "file-1"}}, "unsupported_parameter", "input_reference.file_id"),
        ({"data": {"model": "tiny-wan", "prompt": "x", "seconds": "4.5"}}, "invalid_parameter", "seconds"),
    ]
    before = [r.id for r in stack.queue.list_jobs("alpha", limit=100)[0]]
    with stack.client("alpha") as c:
        for request, code, param in cases:
            answer = c.post("/v1/videos", **request)
            assert answer.status_code == 400, (request, answer.text)
            error = answer.json()["error"]
            assert (error["code"], error["type"]) == (code, "invalid_request_error"), (request, error)
            if param is not None:
                assert error["param"] == param, (request, error)
    assert [r.id for r in stack.queue.list_jobs("alpha", limit=100)[0]] == before


def test_the_rate_limit_is_a_rate_limit_error(tmp_path: Path, sdk: SDK) -> None:
    limited = start_stack(tmp_path / "limited", api={"rate_limit_burst": 1, "rate_limit_per_s": 0.01})
    try:
        add_keys(limited)
        client = sdk(limited)
        assert client.videos.list().data == []
        with pytest.raises(openai.RateLimitError) as refused:
            client.videos.list()
        assert (refused.value.code, refused.value.type) == ("rate_limited", "rate_limit_error")
        assert int(refused.value.response.headers["Retry-After"]) > 0
    finally:
        limited.stop()


# ------------------------------------------------------------------------ distributed: Redis and S3


@pytest.fixture
def fleet_stack(tmp_path: Path, redis_url: str, seaweed: SeaweedServer) -> Iterator[Stack]:
    """The API of the distributed mode: Redis queue, an S3 store (a bucket of its own), no worker."""
    port = free_port()
    settings = Settings(
        data_dir=str(tmp_path),
        queue={"backend": "redis", "redis_url": redis_url},
        store=seaweed.store_settings(s3_bucket=f"videos-{uuid.uuid4().hex[:12]}").model_dump(),
        api={"unhosted_models": "accept"},
    )
    queue = open_queue(settings.queue)
    store = S3Store(settings.store)
    store.ensure_bucket()
    keys = SqliteKeyStore(tmp_path / "keys.db")
    catalog = load_catalog()
    app = create_app(settings, queue=queue, store=store, catalog=catalog, keys=keys)
    server, thread = serve_app(app, port)
    stack = Stack(f"http://127.0.0.1:{port}", settings, queue, store, keys, catalog, server, thread)
    add_keys(stack)
    yield stack
    stack.stop()


def _finish_as_a_worker(stack: Stack, video_id: str, tmp_path: Path) -> dict[str, bytes]:
    """Claim the video's job, upload an MP4 and a poster to the store, finish it succeeded; the bytes by kind."""
    claim = stack.queue.claim("test-worker", [QUEUED_MODEL])
    assert claim is not None and claim.job_id == video_id
    contents = {"video": b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8, "poster": b"\xff\xd8\xff" + bytes(500)}
    artifacts = []
    for kind, name, content_type in (("video", "video.mp4", "video/mp4"), ("poster", "poster.jpg", "image/jpeg")):
        path = tmp_path / name
        path.write_bytes(contents[kind])
        key = artifact_key(video_id, claim.attempt, "test", name)
        stored = stack.store.put_file(key, path, content_type=content_type)
        artifacts.append(
            Artifact(
                kind=kind,
                key=key,
                content_type=content_type,
                bytes=stored.bytes,
                sha256=stored.sha256,
                width=256,
                height=144,
            )
        )
    assert stack.queue.finish(claim, Outcome(status=Status.succeeded, artifacts=artifacts))
    return contents


def test_on_s3_the_content_redirects_to_a_signed_url_and_delete_empties_the_bucket_prefix(
    fleet_stack: Stack, sdk: SDK, tmp_path: Path
) -> None:
    client = sdk(fleet_stack)
    video = client.videos.create(model=QUEUED_MODEL, prompt="a harbour at dawn", seconds="1")
    contents = _finish_as_a_worker(fleet_stack, video.id, tmp_path)
    assert client.videos.retrieve(video.id).status == "completed"

    with fleet_stack.client("alpha") as c:
        redirect = c.get(f"/v1/videos/{video.id}/content", follow_redirects=False)
    assert redirect.status_code == 302
    location = redirect.headers["location"]
    assert location.startswith(fleet_stack.settings.store.s3_endpoint_url or "") and "X-Amz-Signature=" in location
    # The SDK follows it (without the API key: another origin) and gets the object's bytes.
    assert client.videos.download_content(video.id).content == contents["video"]
    assert client.videos.download_content(video.id, variant="thumbnail").content == contents["poster"]

    prefix = artifact_prefix(video.id)
    assert len(list(fleet_stack.store.list_objects(prefix))) == 2
    assert client.videos.delete(video.id).deleted
    assert list(fleet_stack.store.list_objects(prefix)) == []
    assert fleet_stack.queue.get(video.id) is None
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve(video.id)

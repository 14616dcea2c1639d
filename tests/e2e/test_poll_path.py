"""The fast poll and create path answers exactly as the sync queue does, on both backends.

Two APIs run side by side over the same backends, keys and store: ``fast`` with the optional pieces
on (``api.fast_path``; ``open_async_queue``: ``AsyncRedisQueue`` on Redis, its round trips over
``queue.redis_wire``'s connections; SQLite polls inline) and ``ref``, the plain path, whose routes call
the sync queue on threads (``OffloadedQueue``) through the framework. Every answer of one must be
the answer of the other, byte for byte in JSON, with the same status and headers, and equal to what the
sync route returned before (the view validated and serialized as a ``response_model``). Then: the key
cache's revocation bound (a clock of the test's own), and Redis going away under the fast path.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from api.api_keys import Scope, SqliteKeyStore
from api.app import create_app
from api.auth import KEY_CACHE_TTL_S, KeyCache
from api.create import build_record
from api.routes.generations import CREATE_ROUTE, POLL_ROUTE
from api.routes.models import MODELS_ROUTE
from api.server import artifacts_app_for, open_limiter
from api.views import GenerationView, generation_view
from foundation.core.catalog import load_catalog
from foundation.core.contract import ErrorInfo, GenerationRecord, Status, Usage, parse_create_request
from foundation.core.errors import ErrorCode
from foundation.queue.async_api import OffloadedQueue, open_async_queue
from foundation.queue.base import JobQueue, Outcome
from foundation.queue.factory import open_queue
from foundation.queue.redis.async_queue import AsyncRedisQueue, WiredRedis
from foundation.settings import Settings
from foundation.stores.factory import open_store
from tests.e2e.conftest import assert_error, create_body, free_port
from tests.integration.queue_support import video_artifact

# Retry-After stays at poll_first_s for an hour, so the two APIs' hints compare equal.
API = {"poll_first_s": 3, "poll_first_window_s": 3600.0, "rate_limit_per_s": 1000.0, "rate_limit_burst": 1000}


def _serve(app: Any) -> tuple[str, uvicorn.Server, threading.Thread]:
    """uvicorn in a thread with the lifespan on: the app closes its asyncio clients at shutdown."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", free_port()))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")  # fail, never skip
        time.sleep(0.02)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


@dataclass
class Pair:
    fast: str
    ref: str
    settings: Settings
    queue: JobQueue
    keys: SqliteKeyStore
    token: str
    other: str  # a key of another project
    servers: list[tuple[uvicorn.Server, threading.Thread]]

    def clients(self, token: str | None = None) -> tuple[httpx.Client, httpx.Client]:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.fast, headers=headers), httpx.Client(base_url=self.ref, headers=headers)

    def stop(self) -> None:
        for server, thread in self.servers:
            server.should_exit = True
            thread.join(timeout=15)
        self.queue.close()
        self.keys.close()


def start_pair(
    data_dir: Path, redis_url: str | None, *, key_cache: KeyCache | None = None, api: dict[str, Any] | None = None
) -> Pair:
    settings = Settings(
        data_dir=str(data_dir),
        queue={
            "backend": "redis" if redis_url else "sqlite",
            "sqlite_path": str(data_dir / "queue.db"),
            "redis_url": redis_url or "redis://127.0.0.1:1/0",
            "max_attempts": 2,
            # The tuned side's round trips and batched creates (the reference app's async queue is the plain one).
            "redis_wire": True,
            "sqlite_group_commit": True,
        },
        store={"backend": "local", "local_root": str(data_dir / "artifacts"), "public_base_url": "http://files"},
        api={**API, **(api or {})},
    )
    queue = open_queue(settings.queue)
    store = open_store(settings.store, data_dir=settings.data_dir)
    keys = SqliteKeyStore(data_dir / "keys.db")
    _, token = keys.create("alpha", [Scope.generations_read, Scope.generations_write])
    _, other = keys.create("beta", [Scope.generations_read, Scope.generations_write])
    common: dict[str, Any] = {
        "queue": queue,
        "store": store,
        "catalog": load_catalog(),
        "keys": keys,
        "artifacts_app": artifacts_app_for(store),
    }
    async_queue = open_async_queue(settings.queue, queue)
    if redis_url:  # the fast path's round trips go over the lean connections (redis_wire), compared below
        assert isinstance(async_queue, AsyncRedisQueue) and isinstance(async_queue.client, WiredRedis)
    fast = create_app(
        settings,
        **common,
        fast_path=True,
        async_queue=async_queue,
        limiter=open_limiter(settings),  # on Redis: the shared counter, awaited on the event loop
        key_cache=key_cache,
    )
    ref = create_app(  # its own limiter: each app closes its own at shutdown
        settings,
        **common,
        limiter=open_limiter(settings),
        async_queue=OffloadedQueue(queue),
        key_cache=KeyCache(ttl_s=0),
    )
    fast_url, fast_server, fast_thread = _serve(fast)
    ref_url, ref_server, ref_thread = _serve(ref)
    servers = [(fast_server, fast_thread), (ref_server, ref_thread)]
    return Pair(fast_url, ref_url, settings, queue, keys, token, other, servers)


@pytest.fixture(params=["sqlite", "redis"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    p = start_pair(tmp_path / "api", redis_url)
    yield p
    p.stop()


def _record(project: str = "alpha", **params: Any) -> GenerationRecord:
    request = parse_create_request(create_body(**params))
    return build_record(request, load_catalog(), project=project, max_attempts=2)


def _lifecycle(queue: JobQueue) -> dict[str, str]:
    """One generation in each state the view renders differently; their ids by state."""
    ids = {name: queue.enqueue(_record()).record.id for name in ("succeeded", "failed", "canceled", "head", "next")}
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == ids["succeeded"]
    video = video_artifact(f"generations/{claim.job_id}/1-abc/video.mp4")
    usage = Usage(output_seconds=1.0, gpu_seconds=0.25)
    done = Outcome(status=Status.succeeded, artifacts=[video], usage=usage, price=claim.record.price_hold)
    assert queue.finish(claim, done)
    claim = queue.claim("w1", ["tiny-wan"])
    assert claim is not None and claim.job_id == ids["failed"]
    # A message no client may see (an internal endpoint): both paths must answer the public sentence.
    error = ErrorInfo(code=ErrorCode.upload_failed, message="PUT http://10.0.0.7:9000/bucket refused")
    assert queue.finish(claim, Outcome(status=Status.failed, error=error))
    queue.cancel(ids["canceled"])
    ids["beta"] = queue.enqueue(_record(project="beta")).record.id
    return ids


def _signed_at_any_second(body: Any) -> Any:
    """``body`` with each artifact's signature and expiry cut off: two GETs a second apart sign URLs
    that expire a second apart (the URL is re-signed on every GET)."""
    if isinstance(body, dict) and isinstance(body.get("artifacts"), list):
        artifacts = [
            {**a, "download_url": a["download_url"].split("?")[0], "expires_at": ""} for a in body["artifacts"]
        ]
        return {**body, "artifacts": artifacts}
    return body


def _same(fast: httpx.Response, ref: httpx.Response) -> dict[str, Any]:
    assert fast.status_code == ref.status_code
    if fast.status_code == 304:  # no body: the tag says which
        assert fast.content == ref.content == b""
        return {}
    assert _signed_at_any_second(fast.json()) == _signed_at_any_second(ref.json())
    for header in ("content-type", "retry-after", "location", "idempotent-replayed", "www-authenticate"):
        assert fast.headers.get(header) == ref.headers.get(header), header
    return fast.json()  # type: ignore[no-any-return]


def test_polls_answer_as_the_sync_path_in_every_state(pair: Pair) -> None:
    ids = _lifecycle(pair.queue)
    store = open_store(pair.settings.store, data_dir=pair.settings.data_dir)
    fast, ref = pair.clients()
    with fast, ref:
        for name in ("succeeded", "failed", "canceled", "head", "next"):
            path = f"/v1/generations/{ids[name]}"
            body = _same(fast.get(path), ref.get(path))
            # What the sync route answered: the view validated and serialized as a response_model.
            record = pair.queue.get(ids[name])
            assert record is not None
            position = None if record.terminal else pair.queue.position(record.id)
            view = GenerationView.model_validate(generation_view(record, store, queue_position=position))
            assert _signed_at_any_second(body) == _signed_at_any_second(json.loads(view.model_dump_json())), name
        states = {name: fast.get(f"/v1/generations/{ids[name]}").json() for name in ids if name != "beta"}
        # Fair share: beta's job, queued last, starts first (alpha has had its turns), then alpha's two.
        assert [states[n]["queue_position"] for n in ("head", "next")] == [1, 2]
        assert states["succeeded"]["artifacts"][0]["download_url"].startswith("http://files/")
        assert states["failed"]["error"]["message"] != "PUT http://10.0.0.7:9000/bucket refused"
        assert fast.get(f"/v1/generations/{ids['head']}").headers["Retry-After"] == "3"
        assert "Retry-After" not in fast.get(f"/v1/generations/{ids['succeeded']}").headers
        # Every refusal the route makes, in the order it makes them, with the same body.
        _same(fast.get(f"/v1/generations/{ids['beta']}"), ref.get(f"/v1/generations/{ids['beta']}"))
        for path in ("/v1/generations/gen_unknown", "/v1/generations/" + "x" * 129, "/v1/generations/a?x=1"):
            _same(fast.get(path), ref.get(path))
        for auth in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer gw_nope"}):
            for path in ("/v1/generations/" + "x" * 129, f"/v1/generations/{ids['head']}?x=1"):
                _same(fast.get(path, headers=auth), ref.get(path, headers=auth))


def _route_samples(client: httpx.Client) -> dict[tuple[str, str, str, str], float]:
    """The hot routes' request counts and timings by (method, route, status, sample) from ``/metrics``."""
    scraped = client.get("/metrics")
    assert scraped.status_code == 200
    return {
        (s.labels.get("method", ""), s.labels["route"], s.labels.get("status", ""), s.name): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
        if s.labels.get("route") in (POLL_ROUTE, CREATE_ROUTE, MODELS_ROUTE)
        and not s.name.endswith(("_bucket", "_sum", "_created"))
    }


def _content(content: bytes | str | None) -> Any:
    """The body as given, or for "chunked" a generator: httpx sends it chunked (the framework's path)."""
    if content != "chunked":
        return content
    return iter([json.dumps(create_body()).encode()])


def _access_lines(caplog: pytest.LogCaptureFixture, count: int, timeout_s: float = 10.0) -> list[logging.LogRecord]:
    """The access lines logged so far, once there are ``count``: the server thread logs a request after its
    response is sent, so a client can hold the answer before the line exists."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [r for r in caplog.records if r.name == "genworker.api.access"]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)


def _side(headers: dict[str, str], side: str) -> dict[str, str]:
    """Each API its own idempotency keys (both share one queue): "stack-1" is "stack-1-fast" there."""
    key = headers.get("Idempotency-Key", "")
    return {**headers, "Idempotency-Key": f"{key}-{side}"} if key.startswith("stack-") else headers


def test_the_fast_path_answers_with_what_the_framework_stack_adds(pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    """Every header (``RateLimit-*``, ``X-Request-Id``, ``WWW-Authenticate``...), the access line and
    the metrics of each kind of poll and create answer: the fast path (``api/fast_path.py``) and the
    framework's routing and middleware give the same, request by request."""
    caplog.set_level(logging.INFO, logger="genworker.api.access")
    gid = pair.queue.enqueue(_record()).record.id
    _, writer = pair.keys.create("alpha", [Scope.generations_write])
    body = json.dumps(create_body()).encode()
    other = json.dumps(create_body(seed=9)).encode()
    cases: list[tuple[str, str, dict[str, str], Any]] = [
        # The catalog first: both bodies are read while the queue is as it is now (creates change depths).
        ("GET", "/v1/models", {}, None),
        ("GET", "/v1/models", {"If-None-Match": "*"}, None),
        ("GET", "/v1/models", {"If-None-Match": '"stale"'}, None),
        ("GET", "/v1/models", {"X-Request-Id": "client-trace-3", "Authorization": ""}, None),
        ("GET", "/v1/models?verbose=1", {}, None),
        ("GET", f"/v1/generations/{gid}", {}, None),
        ("GET", f"/v1/generations/{gid}", {"X-Request-Id": "client-trace-1"}, None),
        ("GET", f"/v1/generations/{gid}", {"X-Request-Id": "not sane!"}, None),
        ("GET", "/v1/generations/gen_unknown", {}, None),
        ("GET", "/v1/generations/" + "x" * 129, {}, None),
        ("GET", f"/v1/generations/{gid}?x=1", {}, None),
        ("GET", f"/v1/generations/{gid}", {"Authorization": ""}, None),
        ("GET", f"/v1/generations/{gid}", {"Authorization": "Bearer gw_nope"}, None),
        ("GET", f"/v1/generations/{gid}", {"Authorization": f"Bearer {writer}"}, None),  # 403: no read scope
        ("POST", "/v1/generations", {"Idempotency-Key": "stack-1"}, body),
        ("POST", "/v1/generations", {"Idempotency-Key": "stack-1"}, body),  # replayed
        ("POST", "/v1/generations", {"Idempotency-Key": "stack-1"}, other),  # 409
        ("POST", "/v1/generations", {"X-Request-Id": "client-trace-2"}, b"{not json"),
        ("POST", "/v1/generations?x=1", {}, body),
        ("POST", "/v1/generations", {"Authorization": ""}, body),
        ("POST", "/v1/generations", {"Idempotency-Key": "k" * 256}, body),
        ("POST", "/v1/generations", {"Idempotency-Key": "stack-2"}, "chunked"),
    ]
    fast, ref = pair.clients()
    with fast, ref:
        before = {c: _route_samples(c) for c in (fast, ref)}
        for method, path, headers, content in cases:
            caplog.clear()
            a, b = (
                c.request(method, path, headers=_side(headers, side), content=_content(content))
                for c, side in ((fast, "fast"), (ref, "ref"))
            )
            if method == "GET" or a.status_code not in (202, 409):
                _same(a, b)
            elif a.status_code == 202:  # two creates: the same answer but for the ids, the seed and the times
                assert (a.status_code, a.json()["status"]) == (b.status_code, b.json()["status"]) == (202, "queued")
            else:  # each names its own generation
                assert (a.status_code, a.json()["error"]["param"]) == (b.status_code, b.json()["error"]["param"])
            names = {k for k in a.headers if k not in ("date", "server")}
            assert names == {k for k in b.headers if k not in ("date", "server")}, path
            varying = {"x-request-id", "ratelimit-remaining", "ratelimit-reset", "location", "content-length"}
            for name in names - varying:
                assert a.headers[name] == b.headers[name], (path, name)
            if headers.get("X-Request-Id", "").startswith("client-trace"):
                assert a.headers["x-request-id"] == b.headers["x-request-id"] == headers["X-Request-Id"]
            assert len(a.headers["x-request-id"]) in (14, 32)
            lines = _access_lines(caplog, 2)
            assert [r.request_id for r in lines] == [a.headers["x-request-id"], b.headers["x-request-id"]]
            for line, answer in zip(lines, (a, b), strict=True):
                seen = (line.method, line.path, line.status, line.bytes)
                assert seen == (method, path.split("?")[0], answer.status_code, len(answer.content)), path
                assert line.client.startswith("127.0.0.1:") and line.elapsed_ms >= 0
        after = {c: _route_samples(c) for c in (fast, ref)}
    counted = [
        {k: v - before[c].get(k, 0.0) for k, v in after[c].items() if v != before[c].get(k, 0.0)} for c in (fast, ref)
    ]
    assert counted[0] == counted[1]
    assert counted[0][("GET", POLL_ROUTE, "200", "genworker_api_requests_total")] == 3
    assert counted[0][("POST", CREATE_ROUTE, "202", "genworker_api_requests_total")] == 3
    assert counted[0][("GET", POLL_ROUTE, "", "genworker_api_request_seconds_count")] == 9
    assert counted[0][("GET", MODELS_ROUTE, "200", "genworker_api_requests_total")] == 3
    assert counted[0][("GET", MODELS_ROUTE, "304", "genworker_api_requests_total")] == 1
    assert counted[0][("GET", MODELS_ROUTE, "400", "genworker_api_requests_total")] == 1
    assert counted[0][("POST", CREATE_ROUTE, "", "genworker_api_request_seconds_count")] == 8


def test_creates_answer_as_the_sync_path(pair: Pair) -> None:
    fast, ref = pair.clients()
    with fast, ref:
        # Created by one path, replayed by the other (the same Idempotency-Key): the same generation.
        for first, then, key in ((fast, ref, "k-fast"), (ref, fast, "k-ref")):
            created = first.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
            assert created.status_code == 202, created.text
            assert created.headers["Location"] == f"/v1/generations/{created.json()['id']}"
            replay_a = then.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
            replay_b = first.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": key})
            assert replay_a.headers["Idempotent-Replayed"] == "true"
            assert _same(replay_a, replay_b) == created.json()
            conflict = {"Idempotency-Key": key}
            _same(
                then.post("/v1/generations", json=create_body(seed=7), headers=conflict),
                first.post("/v1/generations", json=create_body(seed=7), headers=conflict),
            )
        one, two = (c.post("/v1/generations", json=create_body(seed=5)).json() for c in (fast, ref))
        assert two["queue_position"] == one["queue_position"] + 1  # both queued behind the replays' jobs
        for field in ("status", "stage", "model", "parameters", "price_hold", "attempt", "max_attempts"):
            assert (field, one[field]) == (field, two[field])
        # Refusals, in the order the sync route made them: query, body, key, header, key lookup, body.
        bad_header = {"Idempotency-Key": "k" * 256}
        cases: list[tuple[str, dict[str, str], bytes]] = [
            ("/v1/generations?x=1", {}, b"{}"),
            ("/v1/generations", {"Authorization": "Bearer gw_nope"}, b"{}"),
            ("/v1/generations", {"Authorization": ""}, b"{}"),
            ("/v1/generations", {"Authorization": "", **bad_header}, b"{}"),
            ("/v1/generations", bad_header, json.dumps(create_body()).encode()),
            ("/v1/generations", {}, b"{not json"),
            ("/v1/generations", {}, json.dumps(create_body(resolution="4000p")).encode()),
        ]
        for path, headers, content in cases:
            _same(fast.post(path, content=content, headers=headers), ref.post(path, content=content, headers=headers))


def test_a_revoked_key_works_until_the_cache_bound_and_never_after(tmp_path: Path) -> None:
    now = [1000.0]
    cache = KeyCache(ttl_s=KEY_CACHE_TTL_S, clock=lambda: now[0])
    p = start_pair(tmp_path / "api", None, key_cache=cache)
    try:
        record, token = p.keys.create("alpha", [Scope.generations_read])
        with httpx.Client(base_url=p.fast, headers={"Authorization": f"Bearer {token}"}) as c:
            assert_error(c.get("/v1/generations/gen_x"), 404, "not_found")  # known key: read and cached
            p.keys.revoke(record.id)
            now[0] += KEY_CACHE_TTL_S * 0.99
            assert_error(c.get("/v1/generations/gen_x"), 404, "not_found")  # within the bound: cached
            now[0] += KEY_CACHE_TTL_S * 0.01
            assert_error(c.get("/v1/generations/gen_x"), 401, "unauthenticated")  # the bound: refused
            now[0] += KEY_CACHE_TTL_S * 10
            assert_error(c.get("/v1/generations/gen_x"), 401, "unauthenticated")  # refusals are not cached
        # A key created after its hash was refused works at once: unknown keys are never cached.
        unknown = httpx.get(f"{p.fast}/v1/generations/gen_x", headers={"Authorization": "Bearer gw_x"})
        assert_error(unknown, 401, "unauthenticated")
        _, fresh = p.keys.create("alpha", [Scope.generations_read])
        with httpx.Client(base_url=p.fast, headers={"Authorization": f"Bearer {fresh}"}) as c:
            assert_error(c.get("/v1/generations/gen_x"), 404, "not_found")
    finally:
        p.stop()


def test_redis_outage_is_503_on_the_fast_path_and_it_recovers(redis_factory, tmp_path: Path) -> None:
    server = redis_factory()
    # Keys and rate limits off Redis, so the 503s below are the queue's own.
    p = start_pair(tmp_path / "api", server.url, api={"keys_backend": "sqlite"})
    try:
        fast, _ = p.clients()
        with fast:
            gid = fast.post("/v1/generations", json=create_body()).json()["id"]
            assert fast.get(f"/v1/generations/{gid}").status_code == 200
            server.kill()
            assert_error(fast.get(f"/v1/generations/{gid}"), 503, "service_unavailable")
            assert_error(fast.post("/v1/generations", json=create_body()), 503, "service_unavailable")
            server.restart()  # no persistence: the job is gone, and so are the server's scripts
            assert_error(fast.get(f"/v1/generations/{gid}"), 404, "not_found")
            created = fast.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": "after"})
            assert created.status_code == 202, created.text  # scripts loaded again (NOSCRIPT) and run
            assert fast.get(created.headers["Location"]).json()["queue_position"] == 0
    finally:
        p.stop()

"""``GET /v1/generations/{id}/events`` (Server-Sent Events) on both queue backends, as a client uses it.

Two real APIs (uvicorn on loopback): one on the SQLite queue, one on a real redis-server, each with a
real ``genworker worker`` process running the tiny Wan model. A generation of ``tiny-wan`` runs on
that worker; one of ``tiny-ltx2`` (hosted by no worker here) stays queued until the test itself
claims it through the real queue and writes its progress and outcome, as a worker would, so the test
decides when each write lands relative to the client's connections.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from foundation.core.contract import Stage, Status
from foundation.queue.base import Outcome
from foundation.settings import settings_env
from genworker.cli import app
from genworker_client import AsyncClient, Client, StreamEvent
from genworker_client.events import SseParser
from tests.client.proxy import DroppingProxy
from tests.e2e.conftest import Stack, add_keys, assert_error, create_body, start_stack
from tests.integration.worker_harness import WorkerProcess, redis_db_url

pytestmark = pytest.mark.slow

STREAM_CAP = 2
EVENTS_API: dict[str, Any] = {
    "events_poll_s": 0.05,
    "events_heartbeat_s": 0.3,
    "events_max_streams_per_key": STREAM_CAP,
    "unhosted_models": "accept",  # tiny-ltx2 is queued for the tests to drive by hand
}
STAGE_ORDER = [s.value for s in Stage]
REDIS_DB = 9


@dataclass
class Read:
    events: list[StreamEvent]
    heartbeats: int
    status: int


def read_stream(stack: Stack, generation_id: str, *, token: str = "alpha", last_event_id: str | None = None,
                stop_after: int | None = None, timeout_s: float = 90.0) -> Read:  # fmt: skip
    """Open the stream and read until the server ends it (or ``stop_after`` messages, then hang up)."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    parser, events = SseParser(), []
    with stack.client(token) as c, c.stream("GET", f"/v1/generations/{generation_id}/events", headers=headers,
                                           timeout=timeout_s) as response:  # fmt: skip
        if response.status_code != 200:
            response.read()
            return Read([], 0, response.status_code)
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            event = parser.feed(line)
            if event is not None:
                events.append(event)
                if stop_after is not None and len(events) >= stop_after:
                    break
    return Read(events, parser.comments, 200)


def _worker_env(stack: Stack, tiny_models_dir: Path) -> dict[str, str]:
    s = stack.settings
    return settings_env(
        {
            "data_dir": s.data_dir,
            "queue": {"backend": s.queue.backend, "sqlite_path": s.queue.sqlite_path, "redis_url": s.queue.redis_url},
            "store": {"backend": "local", "local_root": s.store.local_root},
            "models": {"tiny_models_dir": str(tiny_models_dir)},
            # A preview at every step (not once a second): the tiny job's few steps each send one.
            "worker": {
                "hosted_models": ["tiny-wan"],
                "preload": ["tiny-wan"],
                "heartbeat_s": 1,
                "drain_grace_s": 1,
                "preview_interval_s": 0,
            },
        }
    ) | {"HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def stacks(
    tmp_path_factory: pytest.TempPathFactory, redis_server: Any, tiny_models_dir: Path
) -> Iterator[dict[str, Stack]]:
    """Both APIs and their workers, started together (the workers' imports overlap)."""
    tmp = tmp_path_factory.mktemp("events")
    made = {
        "sqlite": start_stack(tmp / "sqlite", api=EVENTS_API),
        "redis": start_stack(tmp / "redis", api=EVENTS_API, redis_url=redis_db_url(redis_server, REDIS_DB)),
    }
    workers = []
    try:
        for name, stack in made.items():
            add_keys(stack)
            workers.append(WorkerProcess(_worker_env(stack, tiny_models_dir), tmp / f"worker-{name}.log").start())
        for worker in workers:
            worker.wait_ready()
        yield made
    finally:
        for worker in workers:
            worker.stop()
        for stack in made.values():
            stack.stop()


@pytest.fixture(params=["sqlite", "redis"])
def stack(request: pytest.FixtureRequest, stacks: dict[str, Stack]) -> Stack:
    return stacks[request.param]


def create(stack: Stack, model: str = "tiny-wan") -> str:
    with stack.client("alpha") as c:
        made = c.post("/v1/generations", json=create_body(model))
    assert made.status_code == 202, made.text
    return str(made.json()["id"])


def test_a_client_sees_every_stage_in_order_then_the_terminal_event(stack: Stack) -> None:
    generation_id = create(stack)
    read = read_stream(stack, generation_id)
    assert read.status == 200
    statuses = [e.status for e in read.events if e.kind == "status"]
    assert statuses == ["queued", "running", "succeeded"]
    assert read.events[-1].terminal and read.events[-1].kind == "status"
    stages = [e.stage for e in read.events if e.kind == "progress"]
    seen = list(dict.fromkeys(stages))
    assert seen == sorted(seen, key=STAGE_ORDER.index)  # in pipeline order, each stage once
    assert {"denoising", "decoding", "encoding", "uploading"} <= set(seen)
    # Progress events sit between the claim and the end, and are every write the worker made.
    kinds = [e.kind for e in read.events]
    assert kinds.index("progress") > statuses.index("running") and kinds[-2] == "progress"
    assert len(stages) == len(stack.queue.progress_notes(generation_id))
    assert len(statuses) == len(stack.queue.events(generation_id))
    denoise = [e.progress for e in read.events if e.stage == "denoising"]
    assert denoise == sorted(denoise) and denoise[-1] == 1.0
    assert len({e.id for e in read.events}) == len(read.events)

    # Resume from any message: exactly what came after it, nothing twice, nothing missing.
    for cut in (0, len(read.events) // 2, len(read.events) - 2):
        resumed = read_stream(stack, generation_id, last_event_id=read.events[cut].id)
        assert resumed.events == read.events[cut + 1 :]
    # Past the terminal event there is nothing more: the stream ends at once, empty.
    assert read_stream(stack, generation_id, last_event_id=read.events[-1].id).events == []


def test_reconnect_while_running_loses_nothing(stack: Stack) -> None:
    """The test is the worker: it claims the queued job and writes progress between two connections."""
    generation_id = create(stack, "tiny-ltx2")
    first = read_stream(stack, generation_id, stop_after=1)
    assert [(e.kind, e.status) for e in first.events] == [("status", "queued")]
    claim = stack.queue.claim("test-worker", ["tiny-ltx2"])
    assert claim is not None and claim.job_id == generation_id
    for stage, progress in [(Stage.loading, 0.0), (Stage.denoising, 0.0), (Stage.denoising, 0.5)]:
        assert stack.queue.progress(claim, stage, progress)
    second = read_stream(stack, generation_id, last_event_id=first.events[-1].id, stop_after=4)
    assert [(e.kind, e.status, e.stage, e.progress) for e in second.events] == [
        ("status", "running", None, None),
        ("progress", "running", "loading", 0.0),
        ("progress", "running", "denoising", 0.0),
        ("progress", "running", "denoising", 0.5),
    ]
    assert stack.queue.progress(claim, Stage.denoising, 1.0)
    assert stack.queue.finish(claim, Outcome(status=Status.canceled))
    third = read_stream(stack, generation_id, last_event_id=second.events[-1].id)
    assert [(e.kind, e.status, e.progress) for e in third.events] == [
        ("progress", "running", 1.0),
        ("status", "canceled", None),
    ]
    assert third.events[-1].terminal


def test_another_project_gets_the_same_404_as_get(stack: Stack) -> None:
    generation_id = create(stack, "tiny-ltx2")
    with stack.client("beta") as c:
        streamed = c.get(f"/v1/generations/{generation_id}/events")
        polled = c.get(f"/v1/generations/{generation_id}")
    assert_error(streamed, 404, "not_found", "id")
    assert streamed.json() == polled.json()
    with stack.client("alpha") as c:
        assert_error(c.get("/v1/generations/gen_nope/events"), 404, "not_found", "id")
        assert_error(c.get(f"/v1/generations/{generation_id}/events", headers={"Last-Event-ID": "x;y"}), 400,
                     "invalid_parameter", "Last-Event-ID")  # fmt: skip
    with stack.client("alpha_write") as c:
        assert_error(c.get(f"/v1/generations/{generation_id}/events"), 403, "insufficient_scope")
    stack.queue.cancel(generation_id)


def test_streams_per_key_are_capped_and_heartbeats_flow(stack: Stack) -> None:
    generation_id = create(stack, "tiny-ltx2")
    path = f"/v1/generations/{generation_id}/events"
    with stack.client("alpha") as c:
        with contextlib.ExitStack() as streams:
            held = [streams.enter_context(c.stream("GET", path)) for _ in range(STREAM_CAP)]
            assert [r.status_code for r in held] == [200] * STREAM_CAP
            refused = c.get(path)
            assert_error(refused, 429, "too_many_streams")
            assert int(refused.headers["Retry-After"]) >= 1
            # Isolation comes before the cap: another project still gets the 404 of GET.
            with stack.client("beta") as other:
                assert other.get(path).status_code == 404
            # Idle streams carry heartbeats (comment lines) every events_heartbeat_s.
            lines = held[0].iter_lines()
            started, heartbeats = time.monotonic(), 0
            while heartbeats < 2:
                heartbeats += next(lines) == ": heartbeat"
            assert time.monotonic() - started < 5
        # A closed stream gives its slot back.
        deadline = time.monotonic() + 5
        while (status := read_stream(stack, generation_id, stop_after=1).status) == 429 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == 200
    stack.queue.cancel(generation_id)


def test_wait_streams_and_falls_back_to_polling(stack: Stack) -> None:
    base_url = f"{stack.base_url}/v1"
    seen: list[StreamEvent] = []
    with Client(base_url, stack.tokens["alpha"]) as client:
        done = client.wait(create(stack), timeout_s=90, on_event=seen.append, first_poll_s=30)
    assert done.status == "succeeded" and done.artifacts  # the first poll would have come after 30 s
    assert seen[-1].terminal and seen[-1].status == "succeeded"

    # No stream left for this key (429): wait polls at its cadence instead.
    queued = create(stack, "tiny-ltx2")
    with stack.client("alpha") as c, contextlib.ExitStack() as streams:
        for _ in range(STREAM_CAP):
            streams.enter_context(c.stream("GET", f"/v1/generations/{queued}/events"))
        fallback: list[StreamEvent] = []
        polled = []
        with Client(base_url, stack.tokens["alpha"]) as client:
            done = client.wait(create(stack), timeout_s=90, on_event=fallback.append, on_progress=polled.append,
                               first_poll_s=0.2, poll_min_s=0.2, poll_max_s=0.3)  # fmt: skip
        assert done.status == "succeeded" and fallback == [] and len(polled) >= 1
    stack.queue.cancel(queued)


def test_async_wait_streams(stacks: dict[str, Stack]) -> None:
    stack = stacks["redis"]

    async def run() -> tuple[str, list[StreamEvent]]:
        seen: list[StreamEvent] = []
        async with AsyncClient(f"{stack.base_url}/v1", stack.tokens["alpha"]) as client:
            done = await client.wait(create(stack), timeout_s=90, on_event=seen.append, first_poll_s=30)
        return done.status, seen

    status, seen = asyncio.run(run())
    assert status == "succeeded" and [e.status for e in seen if e.kind == "status"] == [
        "queued",
        "running",
        "succeeded",
    ]


def test_wait_resumes_after_a_dropped_connection(stacks: dict[str, Stack]) -> None:
    """A real proxy swallows the first stream's answer: the client reconnects and still gets it all."""
    stack = stacks["sqlite"]
    proxy = DroppingProxy(int(stack.base_url.rsplit(":", 1)[1]), drop=lambda _m, path: path.endswith("/events"))
    try:
        seen: list[StreamEvent] = []
        with Client(proxy.base_url, stack.tokens["alpha"]) as client:
            done = client.wait(create(stack), timeout_s=90, on_event=seen.append, first_poll_s=30)
        assert done.status == "succeeded"
        assert [e.status for e in seen if e.kind == "status"] == ["queued", "running", "succeeded"]
        assert [r.dropped for r in proxy.requests if r.path.endswith("/events")] == [True, False]
    finally:
        proxy.close()


def test_watch_prints_each_stage_and_exits_with_the_status(stacks: dict[str, Stack]) -> None:
    stack = stacks["sqlite"]
    generation_id = create(stack)
    env = {"GENWORKER_BASE_URL": stack.base_url, "GENWORKER_API_KEY": stack.tokens["alpha"]}
    result = CliRunner().invoke(app, ["client", "watch", generation_id], env=env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{generation_id}  tiny-wan  ")
    assert lines[-1] == f"{generation_id}  succeeded"
    body = [line.split("  ", 1)[1] for line in lines[1:-1]]
    assert body[0] == "queued" and body[1] == "running" and body[-1] == "succeeded"
    assert "running denoising" in body and "running uploading" in body

    canceled = create(stack, "tiny-ltx2")
    with stack.client("alpha") as c:
        assert c.post(f"/v1/generations/{canceled}/cancel").status_code == 200
    result = CliRunner().invoke(app, ["client", "watch", canceled], env=env)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-1] == f"{canceled}  canceled"


def test_a_stream_with_httpx_sees_the_wire_format(stacks: dict[str, Stack]) -> None:
    """The raw bytes: ``id:``, ``event:``, ``data:`` lines and a blank line per message."""
    stack = stacks["sqlite"]
    generation_id = create(stack, "tiny-ltx2")
    stack.queue.cancel(generation_id)
    with stack.client("alpha") as c:
        text = c.get(f"/v1/generations/{generation_id}/events").text
    messages = [m for m in text.split("\n\n") if m and not m.startswith(":")]
    assert len(messages) == 2
    for message, status in zip(messages, ["queued", "canceled"], strict=True):
        lines = message.split("\n")
        assert lines[0].startswith("id: ") and lines[1] == "event: status" and lines[2].startswith("data: {")
        assert f'"status":"{status}"' in lines[2]


def _raw_messages(stack: Stack, generation_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The stream's messages as (event, id, data), read to the end with plain httpx."""
    with stack.client("alpha") as c:
        text = c.get(f"/v1/generations/{generation_id}/events", timeout=90).text
    messages = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
        if fields:
            messages.append((fields["event"], fields["id"], json.loads(fields["data"])))
    return messages


def test_previews_arrive_in_order_after_their_progress_and_a_request_can_turn_them_off(stack: Stack) -> None:
    from PIL import Image

    generation_id = create(stack)
    messages = _raw_messages(stack, generation_id)
    previews = [(i, data) for i, (event, _, data) in enumerate(messages) if event == "preview"]
    steps = [data["step"] for _, data in previews]
    assert len(steps) >= 2 and steps == sorted(set(steps))  # one per step here, in step order
    for i, data in previews:
        event, event_id, progress = messages[i - 1]  # each follows the progress write that carried it
        assert event == "progress" and progress["stage"] == "denoising" and event_id == messages[i][1]
        assert progress["progress"] == round(data["step"] / data["total"], 4)
        assert set(data) == {"step", "total", "image"} and data["image"].startswith("data:image/jpeg;base64,")
        jpeg = base64.b64decode(data["image"].split(",", 1)[1])
        assert len(jpeg) <= 20_000
        with Image.open(io.BytesIO(jpeg)) as image:
            assert image.format == "JPEG" and image.width <= 256
    assert previews[-1][1]["step"] == previews[-1][1]["total"]
    # The record never holds a preview: it lives in the progress notes only.
    with stack.client("alpha") as c:
        assert "data:image" not in c.get(f"/v1/generations/{generation_id}").text
    with stack.client("alpha") as c:
        made = c.post("/v1/generations", json=create_body(preview=False))
    assert made.status_code == 202, made.text
    quiet = _raw_messages(stack, made.json()["id"])
    assert quiet[-1][2]["status"] == "succeeded" and not [m for m in quiet if m[0] == "preview"]

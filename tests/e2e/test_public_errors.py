"""What a client reads in ``error.message`` of a failed generation: the code's fixed public sentence,
never a store endpoint URL, a server path, an adapter class path, a Python class name or ffmpeg's
stderr. The details stay in the worker's JSON log, with the job id.

Two halves, both read through the real HTTP API as a client does:

- **every error code**: a failed record per code, its message as leaky as an older worker wrote it
  (a URL, paths, a class path, an exception name, ffmpeg's stderr), is served with only the code's
  public sentence, by ``GET /v1/generations/{id}`` and by the list;
- **real failures**: a real ``genworker worker`` on a real redis-server and a real SeaweedFS meets
  model code that raises, runs out of memory, runs past its time limit, weights at a path that is
  not there, a payload the catalog refuses, ffmpeg failing with a path on its stderr, and the store
  going away mid-backlog. Each job fails with its code, the worker's log has the details, and the
  API's response body has none of them.
"""

from __future__ import annotations

import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from foundation.core.catalog import Catalog, load_catalog
from foundation.core.contract import ErrorInfo, GenerationRecord, Status
from foundation.core.errors import PUBLIC_MESSAGES, ErrorCode
from foundation.media.ffmpeg import ffmpeg_exe
from foundation.queue.base import Outcome
from foundation.settings import settings_env
from tests.e2e.conftest import Stack, add_keys, create_body, start_stack
from tests.integration.worker_harness import WorkerProcess, make_record, redis_db_url, write_test_catalog
from tests.reliability.support import TERMINAL, RestartableSeaweed, s3_store_env

# What must never reach a client: a URL, an absolute or relative path, a ``package.module:Class``
# adapter path, a CamelCase class name (``ValueError``, ``OutOfMemoryError``), ffmpeg's words.
_LEAKS = {
    "url": re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?"),
    "path": re.compile(r"/|\\"),
    "class path": re.compile(r"\b[a-z_]\w*(?:\.\w+)+(?::\w+)?\b"),
    "class name": re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b\w+(?:Error|Exception)\b"),
    "stderr": re.compile(r"ffmpeg|stderr|conversion failed|libx264|exit \d|errno|traceback", re.IGNORECASE),
}

# An older worker's message: every kind of detail at once.
_LEAKY = (
    "upload to http://10.0.7.12:8333/genworker-artifacts/generations/gen_x/1-0123456789ab/video.mp4 failed; "
    "/var/lib/genworker/work/gen_x/video.mp4: pipelines.families.wan:WanTextToVideo raised RuntimeError; "
    "ffmpeg exited 1: [libx264 @ 0x55d0] Conversion failed!"
)


def assert_public(error: dict[str, Any], code: ErrorCode) -> None:
    assert error == {"code": code.value, "message": PUBLIC_MESSAGES[code]}, error
    for kind, pattern in _LEAKS.items():
        assert not pattern.search(error["message"]), f"{code}: {kind} in {error['message']!r}"


def test_every_public_message_is_short_and_free_of_internals() -> None:
    assert set(PUBLIC_MESSAGES) == set(ErrorCode)
    for code, message in PUBLIC_MESSAGES.items():
        assert 0 < len(message) <= 100, code
        for kind, pattern in _LEAKS.items():
            assert not pattern.search(message), f"{code}: {kind} in {message!r}"


def test_the_error_page_lists_every_code_with_its_public_message() -> None:
    page = (Path(__file__).parents[2] / "docs" / "errors.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \|$", page, flags=re.MULTILINE))
    assert rows == {code.value: message for code, message in PUBLIC_MESSAGES.items()}


@pytest.fixture
def roomy_stack(tmp_path: Path) -> Iterator[Stack]:
    """A fresh stack whose rate limit lets one key make two requests per error code in a burst."""
    stack = start_stack(tmp_path / "api", api={"rate_limit_burst": 10 * len(ErrorCode)})
    add_keys(stack)
    yield stack
    stack.stop()


def test_every_error_code_is_served_with_its_public_message_only(roomy_stack: Stack) -> None:
    """Records as an older worker wrote them (the details in ``error.message``) come out clean."""
    stack = roomy_stack
    ids: dict[ErrorCode, str] = {}
    with stack.client("alpha") as c:
        for code in ErrorCode:
            gid = c.post("/v1/generations", json=create_body()).json()["id"]
            claim = stack.queue.claim("older-worker", ["tiny-wan"], block_s=0)
            assert claim is not None and claim.job_id == gid
            leaky = ErrorInfo(code=code, message=f"{code.value}: {_LEAKY}")
            assert stack.queue.finish(claim, Outcome(status=Status.failed, error=leaky))
            stored = stack.queue.get(gid)
            assert stored is not None and stored.error == leaky  # the record really holds the details
            ids[code] = gid
        listed = {g["id"]: g for g in c.get("/v1/generations", params={"limit": 100}).json()["data"]}
        for code, gid in ids.items():
            response = c.get(f"/v1/generations/{gid}")
            assert response.status_code == 200, response.text
            assert response.json()["status"] == "failed"
            assert_public(response.json()["error"], code)
            assert_public(listed[gid]["error"], code)
            assert "10.0.7.12" not in response.text and "/var/lib" not in response.text


# -------------------------------------------------------------------------------- real failures

_FFMPEG = """#!/bin/sh
# Fails encode commands (they read frames from stdin) while the fault file exists.
case " $* " in
  *" -i "*)
    if [ -e {fault} ]; then
      echo "{work}/video.mp4: Invalid argument" >&2
      echo "[libx264 @ 0x55d0c0] Conversion failed!" >&2
      exit 1
    fi
    ;;
esac
exec {real} "$@"
"""

MISSING_WEIGHTS = "/srv/genworker/weights/broken-wan"
WORKER_MODELS = ["tiny-wan", "faulty-raise", "faulty-oom", "timeout-wan", "broken-wan"]


def _catalog_with_broken_model(path: Path) -> Path:
    """The test catalog plus ``broken-wan``: tiny Wan pointing at weights that are not there."""
    write_test_catalog(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    tiny = next(m for m in data["models"] if m["id"] == "tiny-wan")
    data["models"].append({**tiny, "id": "broken-wan", "tiny": False, "weights": MISSING_WEIGHTS})
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory, redis_server: Any, tiny_models_dir: Path
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("public-errors")
    redis_url = redis_db_url(redis_server, 5)
    redis.Redis.from_url(redis_url).flushdb()  # this module's own database of the shared server
    seaweed = RestartableSeaweed(tmp / "seaweed")
    server = seaweed.start()
    fault = tmp / "ffmpeg-fault"
    wrapper = tmp / "ffmpeg"
    wrapper.write_text(_FFMPEG.format(fault=fault, work=tmp / "work", real=ffmpeg_exe()), encoding="utf-8")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    catalog = _catalog_with_broken_model(tmp / "catalog.yaml")
    settings = {
        "data_dir": str(tmp / "data"),
        "catalog_path": str(catalog),
        "queue": {"backend": "redis", "redis_url": redis_url, "lease_ttl_s": 5, "retry_backoff_s": 0.2},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        "worker": {
            "hosted_models": WORKER_MODELS,
            "preload": ["tiny-wan"],
            "heartbeat_s": 1,
            "max_backoff_s": 1,
            "model_load_failure_workers": 1,  # one worker here: its load failure fails the job
        },
        "encoder": {"preset": "ultrafast"},
    }
    env = {**settings_env(settings), **s3_store_env(server), "IMAGEIO_FFMPEG_EXE": str(wrapper)}
    worker = WorkerProcess(env, tmp / "worker.log").start()
    stack = start_stack(tmp / "api", redis_url=redis_url)
    add_keys(stack)
    try:
        worker.wait_ready()
        yield {
            "worker": worker,
            "stack": stack,
            "seaweed": seaweed,
            "endpoint": server.endpoint,
            "fault": fault,
            "tmp": tmp,
            "catalog": load_catalog(catalog),
        }
    finally:
        worker.stop()
        stack.stop()
        seaweed.stop()


def _enqueue(stack: Stack, catalog: Catalog, model: str, **params: Any) -> GenerationRecord:
    """A record of project ``alpha`` written to the queue as the API would (the API's own catalog has
    no fault models, so it would refuse them)."""
    record = make_record(catalog, model, **params).model_copy(update={"project": "alpha"})
    stack.queue.enqueue(record)
    return record


def _wait_terminal(site: dict[str, Any], ids: list[str], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = [site["stack"].queue.get(i) for i in ids]
        if all(r is not None and r.status in TERMINAL for r in records):
            return
        time.sleep(0.2)
    raise AssertionError(f"not terminal in {timeout_s}s:\n{site['worker'].log_tail()}")


def _logged(worker: WorkerProcess, job_id: str, until: str) -> str:
    """The job's log lines with their tracebacks, once ``until`` is in them (``WorkerProcess.job_log``)."""
    worker.job_log(job_id, until=until)
    return "\n".join(f"{e['msg']} {e.get('exc', '')}" for e in worker.logs() if e.get("job_id") == job_id)


def _assert_failed_cleanly(site: dict[str, Any], job_id: str, code: ErrorCode, detail: str) -> None:
    """Failed with ``code``; the API body says only the public sentence; the log has ``detail``."""
    with site["stack"].client("alpha") as c:
        response = c.get(f"/v1/generations/{job_id}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "failed", body
    assert_public(body["error"], code)
    for secret in (site["endpoint"], str(site["tmp"]), MISSING_WEIGHTS, "faulty_adapters", "Conversion failed"):
        assert secret not in response.text, f"{code}: {secret!r} reached the client"
    logged = _logged(site["worker"], job_id, detail)
    assert detail in logged, f"{code}: {detail!r} not in the worker's log for {job_id}:\n{logged}"


@pytest.mark.slow
def test_real_failures_reach_the_client_without_their_details(site: dict[str, Any]) -> None:
    stack, catalog = site["stack"], site["catalog"]
    site["fault"].write_text("exit", encoding="utf-8")
    too_big = make_record(catalog, "tiny-wan").model_copy(update={"project": "alpha"})
    too_big = too_big.model_copy(update={"parameters": too_big.parameters.model_copy(update={"resolution": "1080p"})})
    stack.queue.enqueue(too_big)
    jobs = {
        ErrorCode.pipeline_error: (_enqueue(stack, catalog, "faulty-raise"), "ValueError: synthetic pipeline failure"),
        ErrorCode.out_of_memory: (_enqueue(stack, catalog, "faulty-oom"), "Tried to allocate 20.00 GiB"),
        ErrorCode.timeout: (_enqueue(stack, catalog, "timeout-wan"), "time limit"),
        ErrorCode.model_load_failed: (_enqueue(stack, catalog, "broken-wan", duration_seconds=1), MISSING_WEIGHTS),
        ErrorCode.invalid_payload: (too_big, "resolution"),
        ErrorCode.encode_failed: (_enqueue(stack, catalog, "tiny-wan", duration_seconds=1), "Conversion failed"),
    }
    try:
        _wait_terminal(site, [record.id for record, _ in jobs.values()])
    finally:
        site["fault"].unlink()
    for code, (record, detail) in jobs.items():
        _assert_failed_cleanly(site, record.id, code, detail)


@pytest.mark.slow
def test_an_unreachable_store_neither_fails_the_job_nor_reaches_the_client(site: dict[str, Any]) -> None:
    """A store outage is nobody's job error: the job goes back to the queue (no attempt used, no error
    on the record, nothing of the store in the API's answer) and succeeds once the store is back, which
    the worker notices by probing it, not by sitting out its backoff."""
    site["seaweed"].stop()
    try:
        record = _enqueue(site["stack"], site["catalog"], "tiny-wan", duration_seconds=1)
        deadline = time.monotonic() + 120
        while "released: backend" not in [e.reason for e in site["stack"].queue.events(record.id)]:
            assert time.monotonic() < deadline, site["worker"].log_tail()
            time.sleep(0.2)
        with site["stack"].client("alpha") as c:
            response = c.get(f"/v1/generations/{record.id}")
        assert response.status_code == 200 and response.json()["status"] in ("queued", "running"), response.text
        assert "error" not in response.json() or response.json()["error"] is None, response.text
        assert site["endpoint"] not in response.text
        where = site["endpoint"].split("://", 1)[1]
        assert where in _logged(site["worker"], record.id, where)  # the detail is logged
    finally:
        site["seaweed"].start()
    _wait_terminal(site, [record.id], timeout_s=120.0)
    done = site["stack"].queue.get(record.id)
    assert done is not None and done.status is Status.succeeded, done

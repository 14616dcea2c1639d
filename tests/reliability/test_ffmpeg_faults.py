"""ffmpeg fails under a working worker: it exits with an error at once, or dies (SIGKILL) part-way
through the frames the worker streams into it.

The worker runs the real ffmpeg (imageio-ffmpeg) through a wrapper named by ``IMAGEIO_FFMPEG_EXE``
(the variable imageio-ffmpeg reads): while a fault file exists the wrapper does what the file says
to encode commands (``exit``: print to stderr and exit 1 before reading a frame; ``crash``: read
64 KiB of frames, then SIGKILL itself), otherwise it runs the real binary. So each job meets the fault
in the worker's own encode path, and the next job, after the file is removed, meets a healthy ffmpeg.

For each: the job ends ``failed: encode_failed`` (a deterministic error: no retry) with ffmpeg's exit
in its message, no object reaches the store, the job's work directory is removed, the worker stays
healthy and the next job succeeds.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import Status
from foundation.core.errors import ErrorCode, public_message
from foundation.media.ffmpeg import ffmpeg_exe
from foundation.stores.base import artifact_prefix
from tests.fixtures.redis_server import start_redis
from tests.fixtures.seaweed import SeaweedServer
from tests.integration.worker_harness import WorkerProcess, make_record, write_test_catalog
from tests.reliability.support import TERMINAL, assert_invariants, s3_store_env, worker_env

pytestmark = pytest.mark.slow

# Encode commands read frames from stdin ("-i pipe:0" or "-i -"); "-encoders"/"-version" probes pass.
_WRAPPER = """#!/bin/sh
fault="$(cat {fault} 2>/dev/null)"
case " $* " in
  *" -i "*)
    if [ "$fault" = "exit" ]; then
      echo "simulated ffmpeg failure: Conversion failed!" >&2
      exit 1
    fi
    if [ "$fault" = "crash" ]; then
      head -c 65536 >/dev/null
      kill -9 $$
    fi
    ;;
esac
exec {real} "$@"
"""


@pytest.fixture(scope="module")
def ffmpeg_fault(
    tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path, seaweed: SeaweedServer
) -> Iterator[dict[str, Any]]:
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue
    from foundation.stores.factory import open_store

    tmp = tmp_path_factory.mktemp("ffmpeg-faults")
    fault = tmp / "fault"
    wrapper = tmp / "ffmpeg"
    wrapper.write_text(_WRAPPER.format(fault=fault, real=ffmpeg_exe()), encoding="utf-8")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    redis = start_redis(tmp / "redis")
    worker: WorkerProcess | None = None
    try:
        catalog = write_test_catalog(tmp / "catalog.yaml")
        env = worker_env(
            tmp, redis.url, tiny_models_dir, catalog, IMAGEIO_FFMPEG_EXE=str(wrapper), **s3_store_env(seaweed)
        )
        worker = WorkerProcess(env, tmp / "worker.log").start()
        queue = open_queue(QueueSettings(backend="redis", redis_url=redis.url, lease_ttl_s=2))
        store = open_store(seaweed.store_settings(), data_dir=tmp)
        worker.wait_ready()
        yield {
            "fault": fault,
            "worker": worker,
            "queue": queue,
            "store": store,
            "seaweed": seaweed,
            "work_root": tmp / "data" / "work",
            "catalog": load_catalog(catalog),
        }
        queue.close()
    finally:
        if worker is not None:
            worker.stop()
        redis.stop()


def run_one(env: dict[str, Any], timeout_s: float = 90.0) -> Any:
    record = make_record(env["catalog"], "tiny-wan", variant="fast", resolution="144p", duration_seconds=1)
    env["queue"].enqueue(record)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = env["queue"].get(record.id)
        if got is not None and got.status in TERMINAL:
            return got
        time.sleep(0.1)
    raise AssertionError(f"{record.id} not terminal in {timeout_s}s:\n{env['worker'].log_tail()}")


def objects_under(env: dict[str, Any], job_id: str) -> list[str]:
    """Every object stored under the job's key prefix (any attempt)."""
    prefix = artifact_prefix(job_id)
    listing = env["store"]._client.list_objects_v2(Bucket=env["store"].bucket, Prefix=prefix)
    return [o["Key"] for o in listing.get("Contents", [])]


@pytest.mark.parametrize("mode", ["exit", "crash"])
def test_failing_ffmpeg_fails_the_job_with_encode_failed_and_the_worker_carries_on(
    ffmpeg_fault: dict[str, Any], mode: str
) -> None:
    env = ffmpeg_fault
    env["fault"].write_text(mode, encoding="utf-8")
    try:
        failed = run_one(env)
    finally:
        env["fault"].unlink()
    assert failed.status is Status.failed, failed
    assert failed.error is not None and failed.error.code is ErrorCode.encode_failed, failed.error
    assert failed.attempt == 1, "encode_failed is deterministic: no retry"
    expected = "exit 1" if mode == "exit" else "exit -9"
    # The record says only the code's public sentence; ffmpeg's exit and stderr go to the worker's log.
    assert failed.error.message == public_message(ErrorCode.encode_failed), failed.error.message
    logged = env["worker"].job_log(failed.id, until=expected)
    assert expected in logged, logged
    if mode == "exit":
        assert "simulated ffmpeg failure" in logged
    assert objects_under(env, failed.id) == []
    assert not any(p.name.startswith(failed.id) for p in env["work_root"].iterdir()), "work dir left behind"

    healthy = run_one(env)
    assert healthy.status is Status.succeeded, healthy
    outcomes = assert_invariants(env["queue"], [failed.id, healthy.id], env["store"], env["worker"])
    assert outcomes == {"failed:encode_failed": 1, "succeeded": 1}
    assert env["worker"].metric("genworker_jobs_total", status="failed", code="encode_failed") >= 1


def test_worker_log_holds_no_store_credentials_prompt_or_signed_url(ffmpeg_fault: dict[str, Any]) -> None:
    """Runs after the faults (module order): the log has a failed and a succeeded job in it by now."""
    env = ffmpeg_fault
    done = run_one(env)
    assert done.status is Status.succeeded
    env["worker"].job_log(done.id, until="succeeded")  # its last line is written
    text = env["worker"].log_path.read_text(encoding="utf-8", errors="replace")
    assert done.id in text, "the log should name the job (so the check below reads a real log)"
    seaweed: SeaweedServer = env["seaweed"]
    for secret in (seaweed.secret_key, done.input.prompt, "X-Amz-Signature", "Signature="):
        assert secret not in text, f"worker log leaks {secret[:12]!r}"

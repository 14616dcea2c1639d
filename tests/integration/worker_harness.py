"""Helpers for the worker integration tests: a real ``genworker worker`` subprocess, a test catalog,
records enqueued as the API would, and polling of records and endpoints.

Nothing here fakes a part: the worker is the installed CLI in a child process, configured only
through ``GENWORKER_*`` environment variables, exactly as ``genworker up`` or an operator runs it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from foundation.core.catalog import Catalog, default_catalog_path, load_catalog
from foundation.core.contract import GenerationRecord, RecordInput, RecordParameters, Status, parse_create_request
from foundation.core.resolve import resolve
from foundation.queue.base import JobQueue
from foundation.settings import settings_env

ROOT = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).with_name("catalog_faults.yaml")
# Worker startup (imports diffusers, loads a tiny model) is slow on a 2-core CI machine.
READY_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_db_url(redis_server: Any, db: int) -> str:
    """The shared session server, database ``db``: each test module keeps its own keys (and jobs)."""
    return f"redis://127.0.0.1:{redis_server.port}/{db}"


def seaweed_env(seaweed: Any) -> dict[str, str]:
    """``GENWORKER_STORE__*`` for the ``seaweed`` fixture's S3 server (what an operator would export)."""
    store = {
        "backend": "s3",
        "s3_endpoint_url": seaweed.endpoint,
        "s3_bucket": seaweed.bucket,
        "s3_region": seaweed.region,
        "s3_access_key_id": seaweed.access_key,
        "s3_secret_access_key": seaweed.secret_key,
    }
    return settings_env({"store": store})


def redis_worker_env(
    *,
    tmp: Path,
    catalog_path: Path,
    redis_url: str,
    lease_ttl_s: float,
    tiny_models_dir: Path,
    hosted: list[str],
    preload: list[str],
    seaweed: Any,
    overrides: Mapping[str, Any] | None = None,
    **extra: str,
) -> dict[str, str]:
    """The environment of a worker on Redis + SeaweedFS, configured as an operator would (env only).
    ``overrides``: more settings (nested, as for ``settings_env``); ``extra``: other variables."""
    settings = {
        "data_dir": str(tmp / "data"),
        "catalog_path": str(catalog_path),
        "queue": {"backend": "redis", "redis_url": redis_url, "lease_ttl_s": lease_ttl_s},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        "worker": {"hosted_models": hosted, "preload": preload, "heartbeat_s": 1},
    }
    return {**settings_env(settings), **settings_env(overrides or {}), **extra, **seaweed_env(seaweed)}


def write_test_catalog(path: Path) -> Path:
    """The tiny models of ``configs/models.yaml`` plus the fault-injecting entries of ``catalog_faults.yaml``."""
    base = yaml.safe_load(default_catalog_path().read_text(encoding="utf-8"))
    faults = yaml.safe_load(FAULTS.read_text(encoding="utf-8"))
    models = [m for m in base["models"] if m.get("tiny")] + faults["models"]
    path.write_text(yaml.safe_dump({"models": models}, allow_unicode=True, sort_keys=False), encoding="utf-8")
    load_catalog(path)  # fail here, with the catalog's own message, rather than in the worker
    return path


def make_record(
    catalog: Catalog, model: str, *, variant: str = "standard", prompt: str | None = None, **params: Any
) -> GenerationRecord:
    """A queued record as the API creates it: validated, resolved, with its price hold."""
    body = {
        "model": model,
        "mode": "text_to_video",
        "variant": variant,
        "parameters": {"seed": 7, **params},
        "input": {"prompt": prompt or f"a lighthouse at dusk {uuid.uuid4().hex[:8]}"},
    }
    request = parse_create_request(body)
    _job, hold = resolve(request, catalog)
    return GenerationRecord(
        id=f"gen_{uuid.uuid4().hex}",
        model=model,
        mode=request.mode,
        variant=request.variant,
        parameters=RecordParameters.model_validate(request.parameters.model_dump()),
        input=RecordInput.model_validate(request.input.model_dump()),
        price_hold=hold,
    )


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Poll ``check`` every 0.1 s until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def claimed_by(queue: JobQueue, job_id: str) -> list[str]:
    """The worker ids that claimed the job, from its events, in order."""
    prefix = "claimed by "
    return [e.reason[len(prefix) :] for e in queue.events(job_id) if e.reason and e.reason.startswith(prefix)]


def wait_for(
    queue: JobQueue,
    job_id: str,
    until: Callable[[GenerationRecord], bool],
    *,
    timeout_s: float = 120.0,
    poll_s: float = 0.02,
) -> tuple[GenerationRecord, list[GenerationRecord]]:
    """Poll the record every ``poll_s`` until ``until`` holds; return it and every distinct record seen."""
    seen: list[GenerationRecord] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = queue.get(job_id)
        assert record is not None, f"record {job_id} vanished"
        if not seen or (record.status, record.stage, record.progress) != (
            seen[-1].status,
            seen[-1].stage,
            seen[-1].progress,
        ):
            seen.append(record)
        if until(record):
            return record, seen
        time.sleep(poll_s)
    last = seen[-1] if seen else None
    raise AssertionError(f"{job_id} did not reach the expected state in {timeout_s}s; last: {last!r}")


def terminal(record: GenerationRecord) -> bool:
    return record.terminal


def status_is(*statuses: Status) -> Callable[[GenerationRecord], bool]:
    return lambda record: record.status in statuses


class WorkerProcess:
    """``genworker worker`` in a child process, its JSON log in a file, its status server on a port.

    By default this checkout's code; ``command`` (run in ``cwd``) is another install's ``genworker worker``,
    which then imports nothing from the checkout."""

    def __init__(
        self, env: dict[str, str], log_path: Path, *, command: list[str] | None = None, cwd: Path = ROOT
    ) -> None:
        self.port = free_port()
        self.env = {**os.environ, **env, **settings_env({"worker": {"metrics_port": self.port}})}
        if command is None:
            self.env.setdefault("PYTHONPATH", str(ROOT))
        else:
            self.env.pop("PYTHONPATH", None)
        self.command = command or [sys.executable, "-m", "genworker.cli", "worker"]
        self.cwd = cwd
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.command, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> WorkerProcess:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.get("/readyz")[0] == 200:
                return self
            time.sleep(0.2)
        raise AssertionError(f"worker not ready within {timeout_s}s:\n{self.log_tail()}")

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read()
        except OSError:
            return 0, b""

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples on ``/metrics`` named ``name`` whose labels include ``labels``
        (0 when none: Prometheus treats a series not yet created as zero)."""
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        total = 0.0
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += float(sample.value)
        return total

    def logs(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("{"):
                lines.append(json.loads(line))
        return lines

    def job_log(self, job_id: str, *, until: str, timeout_s: float = 10.0) -> str:
        """The job's log messages (joined by spaces), once ``until`` is among them or ``timeout_s`` passed:
        the worker writes its lines from a thread of its own (INFO lines every 50 ms, warnings and errors
        at once), so a line logged before the job's terminal write may land just after it."""
        deadline = time.monotonic() + timeout_s
        while True:
            logged = " ".join(str(e.get("msg")) for e in self.logs() if e.get("job_id") == job_id)
            if until in logged or time.monotonic() > deadline:
                return logged
            time.sleep(0.05)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait_exit(self, timeout_s: float = 60.0) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker did not exit within {timeout_s}s:\n{self.log_tail()}") from None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers; only this process (by PID)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

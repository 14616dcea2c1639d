"""The other ways ``open_queue`` reaches Redis, each against a real server: Sentinel (the master the
sentinels name), TLS (``rediss://`` with a private CA and a client certificate) and ACL users.

Each test runs one job's whole life through the queue (``_one_job_lifecycle``), so a missing
permission, a refused certificate or a wrong address fails here rather than on a fleet.
The certificates in ``cluster_tls/`` are test-only (see its README).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from foundation.core.contract import Stage, Status
from foundation.core.errors import BackendUnavailable
from foundation.queue import keys
from foundation.queue.base import JobQueue, WorkerHeartbeat
from foundation.queue.config import QueueSettings
from foundation.queue.factory import open_queue
from foundation.queue.redis.connect import parse_address
from tests.fixtures.redis_server import RedisServer
from tests.integration.queue_support import new_record
from tests.integration.test_queue_contract import _success

TLS = Path(__file__).with_name("cluster_tls")
START_TIMEOUT_S = 15.0
# What the documented least-privilege ACL grants (docs/operators.md): the queue's keys, every
# command outside @dangerous. Workers and API replicas need nothing else.
QUEUE_ACL = ["on", ">queue-secret", "resetkeys", "~gw:*", "resetchannels", "+@all", "-@dangerous"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_job_lifecycle(queue: JobQueue) -> str:
    """Every kind of call a worker and an API make for one job; returns the job id."""
    record = queue.enqueue(new_record(), idempotency_key="k1", request_hash="h1").record
    assert queue.depth("tiny-wan") == 1 and queue.position(record.id) == 0
    claim = queue.claim("w1", ["tiny-wan", "tiny-ltx2"], block_s=0.3)
    assert claim is not None and claim.job_id == record.id
    assert queue.renew(claim)
    assert queue.progress(claim, Stage.denoising, 0.5)
    assert not queue.cancel_requested(record.id)
    queue.heartbeat(WorkerHeartbeat(worker_id="w1", hosted_models=["tiny-wan"]), ttl_s=5)
    assert [w.worker_id for w in queue.live_workers()] == ["w1"]
    assert queue.finish(claim, _success())
    assert queue.reclaim_expired() == 0
    done = queue.get(record.id)
    assert done is not None and done.status is Status.succeeded
    assert [e.status for e in queue.events(record.id)] == [Status.queued, Status.running, Status.succeeded]
    assert [r.id for r in queue.list_jobs("proj-a")[0]] == [record.id]
    return record.id


@pytest.fixture
def opened() -> Iterator[list[JobQueue]]:
    queues: list[JobQueue] = []
    yield queues
    for q in queues:
        q.close()


# ------------------------------------------------------------------------------------------ Sentinel
class Sentinel:
    """``redis-server <conf> --sentinel`` watching one master; stopped by PID."""

    def __init__(self, directory: Path, master: RedisServer, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        conf = directory / "sentinel.conf"  # sentinel rewrites its config: a file of its own
        conf.write_text(
            f"sentinel monitor {name} 127.0.0.1 {master.port} 1\nsentinel down-after-milliseconds {name} 5000\n"
        )
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed"
        args = [binary, str(conf), "--sentinel", "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--dir", str(directory), "--daemonize", "no", "--logfile", str(directory / "sentinel.log")]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_monitoring(name)

    def _wait_monitoring(self, name: str) -> None:
        probe = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, socket_connect_timeout=0.5)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                assert self.proc.poll() is None, f"sentinel exited with {self.proc.returncode}"
                try:
                    if probe.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name):
                        return
                except redis.ConnectionError:
                    pass
                time.sleep(0.05)
        finally:
            probe.close()
        self.stop()
        raise AssertionError(f"sentinel on {self.port} did not monitor {name} within {START_TIMEOUT_S} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)


def test_sentinel_mode_uses_the_master_the_sentinels_name(
    tmp_path: Path, redis_factory: Callable[..., RedisServer], opened: list[JobQueue]
) -> None:
    master = redis_factory()
    sentinel = Sentinel(tmp_path / "sentinel", master, "genworker")
    try:
        settings = QueueSettings(
            backend="redis",
            redis_mode="sentinel",
            redis_url="redis://ignored-in-sentinel-mode/3",  # the db (3) is used, the host is not
            sentinel_addresses=[f"127.0.0.1:{sentinel.port}"],
            sentinel_master="genworker",
        )
        queue = open_queue(settings)
        opened.append(queue)
        job_id = _one_job_lifecycle(queue)
        direct = redis.Redis(host="127.0.0.1", port=master.port, db=3, decode_responses=True)
        try:
            assert direct.hget(keys.job_record("tiny-wan", job_id), "status") == "succeeded"
        finally:
            direct.close()
        wrong = settings.model_copy(update={"sentinel_master": "no-such-master"})
        with pytest.raises(BackendUnavailable) as no_master:
            open_queue(wrong).get(job_id)
        assert isinstance(no_master.value.__cause__, redis.sentinel.MasterNotFoundError)
    finally:
        sentinel.stop()


def test_sentinel_mode_without_sentinels_is_refused() -> None:
    with pytest.raises(ValueError, match="sentinel_addresses"):
        open_queue(QueueSettings(backend="redis", redis_mode="sentinel"))


# ------------------------------------------------------------------------------------------ TLS
@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[int]:
    """redis-server with TLS only (plain TCP off) that requires a client certificate; yields its port."""
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not installed"
    port = _free_port()
    args = [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
    args += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", str(tmp_path / "redis.log")]
    args += ["--tls-cert-file", str(TLS / "server.crt"), "--tls-key-file", str(TLS / "server.key")]
    args += ["--tls-ca-cert-file", str(TLS / "ca.crt"), "--tls-auth-clients", "yes"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = redis.Redis(
        host="127.0.0.1",
        port=port,
        ssl=True,
        ssl_ca_certs=str(TLS / "ca.crt"),
        ssl_certfile=str(TLS / "client.crt"),
        ssl_keyfile=str(TLS / "client.key"),
        socket_connect_timeout=0.5,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, (tmp_path / "redis.log").read_text()
            try:
                if probe.ping():
                    break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "TLS redis-server did not answer"
                time.sleep(0.05)
        yield port
    finally:
        probe.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def _tls_settings(port: int, **overrides: object) -> QueueSettings:
    settings = QueueSettings(
        backend="redis",
        redis_url=f"rediss://127.0.0.1:{port}/0",
        tls_ca_file=str(TLS / "ca.crt"),
        tls_cert_file=str(TLS / "client.crt"),
        tls_key_file=str(TLS / "client.key"),
    )
    return settings.model_copy(update=overrides)


def test_rediss_with_a_private_ca_and_a_client_certificate(tls_server: int, opened: list[JobQueue]) -> None:
    queue = open_queue(_tls_settings(tls_server))
    opened.append(queue)
    _one_job_lifecycle(queue)


@pytest.mark.parametrize(
    "missing",
    [{"tls_ca_file": None}, {"tls_cert_file": None, "tls_key_file": None}],
    ids=["server-cert-not-trusted", "no-client-cert"],
)
def test_rediss_refuses_what_tls_does_not_allow(tls_server: int, missing: dict[str, None]) -> None:
    queue = open_queue(_tls_settings(tls_server, **missing))
    try:
        with pytest.raises(BackendUnavailable) as refused:
            queue.depth("tiny-wan")
        assert isinstance(refused.value.__cause__, redis.ConnectionError)
    finally:
        queue.close()


# ------------------------------------------------------------------------------------------ ACL
@pytest.fixture
def acl_server(redis_factory: Callable[..., RedisServer]) -> RedisServer:
    """A server whose default user is off: only the ``genworker`` user (least privilege) gets in."""
    server = redis_factory()
    admin = server.client()
    try:
        admin.execute_command("ACL", "SETUSER", "admin", "on", ">admin-secret", "~*", "&*", "+@all")
        admin.execute_command("ACL", "SETUSER", "genworker", *QUEUE_ACL)
        admin.execute_command("ACL", "SETUSER", "default", "off")
    finally:
        admin.close()
    return server


def test_acl_user_from_the_url_with_least_privilege(acl_server: RedisServer, opened: list[JobQueue]) -> None:
    url = f"redis://genworker:queue-secret@127.0.0.1:{acl_server.port}/0"
    queue = open_queue(QueueSettings(backend="redis", redis_url=url))
    opened.append(queue)
    _one_job_lifecycle(queue)


def test_acl_settings_override_the_url(acl_server: RedisServer, opened: list[JobQueue]) -> None:
    url = f"redis://nobody:wrong@127.0.0.1:{acl_server.port}/0"
    settings = QueueSettings(backend="redis", redis_url=url)
    refused = open_queue(settings)
    opened.append(refused)
    with pytest.raises(BackendUnavailable) as denied:
        refused.depth("tiny-wan")
    assert isinstance(denied.value.__cause__, redis.AuthenticationError)
    fixed = settings.model_copy(update={"redis_username": "genworker", "redis_password": SecretStr("queue-secret")})
    queue = open_queue(fixed)
    opened.append(queue)
    _one_job_lifecycle(queue)


# ------------------------------------------------------------------------------------------ addresses
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.5:7000", ("10.0.0.5", 7000)),
        ("redis-2", ("redis-2", 6379)),
        ("[::1]:7001", ("::1", 7001)),
        ("[fe80::1]", ("fe80::1", 6379)),
    ],
)
def test_node_addresses_parse(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


def test_only_redis_schemes_are_accepted() -> None:
    with pytest.raises(ValueError, match="redis:// or rediss://"):
        open_queue(QueueSettings(backend="redis", redis_url="http://127.0.0.1:6379/0"))

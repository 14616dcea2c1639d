"""The API served by a real uvicorn on a free loopback port, over a real SQLite queue, a real local
artifact store and a real SQLite key store. Tests talk to it with httpx, as a client would."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from api.api_keys import KeyStore, Scope, SqliteKeyStore
from api.app import create_app
from api.limits import MemoryLimiter
from api.server import artifacts_app_for
from foundation.core.catalog import Catalog, load_catalog
from foundation.queue.base import JobQueue
from foundation.queue.factory import open_queue
from foundation.settings import Settings
from foundation.stores.base import ArtifactStore
from foundation.stores.factory import open_store

READ = Scope.generations_read
WRITE = Scope.generations_write

# Shortened polling hints so tests that follow Retry-After stay quick.
FAST_POLLING: dict[str, Any] = {"poll_first_s": 1, "poll_first_window_s": 2.0, "poll_min_s": 1, "poll_max_s": 2}


@dataclass
class Stack:
    base_url: str
    settings: Settings
    queue: JobQueue
    store: ArtifactStore
    keys: KeyStore
    catalog: Catalog
    server: uvicorn.Server
    thread: threading.Thread
    tokens: dict[str, str] = field(default_factory=dict)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """The address only, where hypothesis prints a failing example's arguments (its printer shows every field
        of a dataclass, whatever their ``repr``): the settings and catalog made it 62 kB, which hypothesis refused
        with a HypothesisWarning in place of the failure."""
        printer.text(f"Stack({self.base_url!r})")

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[token]}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30.0)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.queue.close()
        self.keys.close()


def serve_app(app: Any, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    """uvicorn in a thread on a socket bound here (so the port is known before the app is built)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")  # fail, never skip
        time.sleep(0.02)
    return server, thread


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_stack(
    data_dir: Path,
    *,
    api: dict[str, Any] | None = None,
    url_ttl_s: int = 600,
    redis_url: str | None = None,
    queue_settings: dict[str, Any] | None = None,
) -> Stack:
    """A full API over backends in ``data_dir`` (several stacks may share one dir, like API replicas);
    the queue is SQLite there, or Redis at ``redis_url``; ``queue_settings``: more of its settings."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    settings = Settings(
        data_dir=str(data_dir),
        queue={
            "backend": "redis" if redis_url else "sqlite",
            "sqlite_path": str(data_dir / "queue.db"),
            "redis_url": redis_url or "redis://127.0.0.1:1/0",
            "max_attempts": 2,
            **(queue_settings or {}),
        },
        store={
            "backend": "local",
            "local_root": str(data_dir / "artifacts"),
            "public_base_url": f"http://127.0.0.1:{port}",
            "url_ttl_s": url_ttl_s,
        },
        api={**FAST_POLLING, **(api or {})},
    )
    queue = open_queue(settings.queue)
    store = open_store(settings.store, data_dir=settings.data_dir)
    keys = SqliteKeyStore(data_dir / "keys.db")
    catalog = load_catalog()
    app = create_app(
        settings,
        queue=queue,
        store=store,
        catalog=catalog,
        keys=keys,
        limiter=MemoryLimiter(settings.api.rate_limit_per_s, settings.api.rate_limit_burst),
        artifacts_app=artifacts_app_for(store),
    )
    server, thread = serve_app(app, port)
    return Stack(f"http://127.0.0.1:{port}", settings, queue, store, keys, catalog, server, thread)


def add_keys(stack: Stack) -> None:
    """Named keys: ``alpha`` (both scopes), ``alpha_read``, ``alpha_write``, ``beta`` (another
    project, both scopes), ``revoked`` (alpha, both scopes, revoked)."""
    specs = {
        "alpha": ("alpha", [READ, WRITE]),
        "alpha_read": ("alpha", [READ]),
        "alpha_write": ("alpha", [WRITE]),
        "beta": ("beta", [READ, WRITE]),
        "revoked": ("alpha", [READ, WRITE]),
    }
    for name, (project, scopes) in specs.items():
        record, token = stack.keys.create(project, scopes)
        stack.tokens[name] = token
        if name == "revoked":
            stack.keys.revoke(record.id)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One API for a test module; tests that need a quiet queue use ``fresh_stack``."""
    s = start_stack(tmp_path_factory.mktemp("api"))
    add_keys(s)
    yield s
    s.stop()


@pytest.fixture
def fresh_stack(tmp_path: Path) -> Iterator[Stack]:
    s = start_stack(tmp_path / "api")
    add_keys(s)
    yield s
    s.stop()


def create_body(
    model: str = "tiny-wan", prompt: str = "a red fox running through snow", **params: Any
) -> dict[str, Any]:
    return {
        "model": model,
        "mode": "text_to_video",
        "variant": "standard",
        "parameters": {"resolution": "144p", "duration_seconds": 1, "ratio": "16:9", **params},
        "input": {"prompt": prompt},
    }


def assert_error(response: httpx.Response, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    """The one error shape, with the expected status, code and (when given) param."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "param"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if param is not None:
        assert body["error"]["param"] == param
    assert "Traceback" not in response.text
    return body["error"]  # type: ignore[no-any-return]

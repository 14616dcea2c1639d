"""The 20-endpoint cap per project holds under concurrent registrations (issue 40: 40 at once stored 29).

Two services over one store, as two API replicas are, register 40 endpoints for one project from 40
threads released together: exactly 20 are stored, the other 20 are refused. On Redis, endpoints stored
before the per-project index existed count towards the cap too."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from api.errors import UrlRefused
from api.webhooks.models import EventType
from api.webhooks.redis_store import ENDPOINTS
from api.webhooks.service import MAX_ENDPOINTS_PER_PROJECT, Webhooks, open_webhooks
from tests.webhooks.conftest import hook_settings

ATTEMPTS = 40


def _register_at_once(replicas: list[Webhooks], project: str) -> tuple[int, int]:
    start = threading.Barrier(ATTEMPTS)

    def register(n: int) -> bool:
        start.wait()
        try:
            replica = replicas[n % len(replicas)]
            replica.add_endpoint(project, f"http://127.0.0.1:9/hook/{n}", [EventType.generation_failed])
        except UrlRefused:
            return False
        return True

    with ThreadPoolExecutor(ATTEMPTS) as pool:
        results = list(pool.map(register, range(ATTEMPTS)))
    return results.count(True), results.count(False)


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_concurrent_registrations_store_exactly_the_cap(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("redis_url") if backend == "redis" else None
    settings = hook_settings(tmp_path, redis_url=redis_url)
    replicas = [open_webhooks(settings), open_webhooks(settings)]
    try:
        assert _register_at_once(replicas, "alpha") == (MAX_ENDPOINTS_PER_PROJECT, ATTEMPTS - MAX_ENDPOINTS_PER_PROJECT)
        assert len(replicas[0].store.list_endpoints("alpha")) == MAX_ENDPOINTS_PER_PROJECT
        removed = replicas[1].store.list_endpoints("alpha")[0]
        assert replicas[1].store.remove_endpoint(removed.id)  # a removal frees one place, no more
        assert _register_at_once(replicas, "alpha") == (1, ATTEMPTS - 1)
        assert len(replicas[0].store.list_endpoints("alpha")) == MAX_ENDPOINTS_PER_PROJECT
    finally:
        for r in replicas:
            r.close()


def test_endpoints_stored_before_the_index_count(tmp_path: Path, redis_url: str) -> None:
    settings = hook_settings(tmp_path, redis_url=redis_url)
    hooks = open_webhooks(settings)
    try:
        endpoint, _ = hooks.add_endpoint("beta", "http://127.0.0.1:9/first")
        client = hooks.store.client  # type: ignore[attr-defined]
        client.delete(*client.keys("{gw:webhooks:endpoints}:*"))  # as written by a version without the index
        for n in range(4):
            old = endpoint.model_copy(update={"id": f"wh_old{n}"})
            client.hset(ENDPOINTS, old.id, old.model_dump_json())
        added, refused = _register_at_once([hooks], "beta")
        assert (added, refused) == (MAX_ENDPOINTS_PER_PROJECT - 5, ATTEMPTS - MAX_ENDPOINTS_PER_PROJECT + 5)
        assert len(hooks.store.list_endpoints("beta")) == MAX_ENDPOINTS_PER_PROJECT
    finally:
        hooks.close()

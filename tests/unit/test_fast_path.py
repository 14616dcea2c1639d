"""Which requests ``api/fast_path.py`` answers itself and which it leaves to the framework's stack
(tests/e2e/test_poll_path.py checks that its answers are the stack's)."""

from __future__ import annotations

from typing import Any

import pytest

from api.fast_path import FastPath
from api.metrics import ApiMetrics


async def _poll(request: Any) -> Any:
    raise AssertionError("not called")


async def _create(request: Any) -> Any:
    raise AssertionError("not called")


async def _models(request: Any) -> Any:
    raise AssertionError("not called")


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": headers or [], **extra}


@pytest.mark.parametrize(
    ("scope", "route"),
    [
        (_scope("GET", "/v1/generations/gen_1"), "poll"),
        (_scope("GET", "/v1/generations/" + "x" * 300), "poll"),  # the route body refuses it (400)
        (_scope("GET", "/v1/generations/gen_1", [(b"content-length", b"2")]), None),
        (_scope("GET", "/v1/generations/gen_1", [(b"transfer-encoding", b"chunked")]), None),
        (_scope("GET", "/v1/generations/gen_1/events"), None),
        (_scope("GET", "/v1/generations/gen_1/"), None),
        (_scope("GET", "/v1/generations/"), None),
        (_scope("GET", "/v1/generations"), None),
        (_scope("HEAD", "/v1/generations/gen_1"), None),
        (_scope("GET", "/v1/generations/gen_1", root_path="/api"), None),
        (_scope("POST", "/v1/generations", [(b"content-length", b"1000")]), "create"),
        (_scope("POST", "/v1/generations", [(b"content-length", b"0")]), "create"),
        (_scope("POST", "/v1/generations", [(b"content-length", b"1001")]), None),  # the body limit's 413
        (_scope("POST", "/v1/generations", [(b"transfer-encoding", b"chunked")]), None),
        (_scope("POST", "/v1/generations", [(b"content-length", b"-1")]), None),
        (_scope("POST", "/v1/generations"), None),
        (_scope("POST", "/v1/generations/gen_1/cancel", [(b"content-length", b"0")]), None),
        (_scope("GET", "/v1/models"), "models"),
        (_scope("GET", "/v1/models", query_string=b""), "models"),
        (_scope("GET", "/v1/models", query_string=b"verbose=1"), None),  # the framework's strict query: 400
        (_scope("GET", "/v1/models", [(b"content-length", b"2")]), None),
        (_scope("GET", "/v1/models/"), None),
        (_scope("HEAD", "/v1/models"), None),
        (_scope("GET", "/v1/models", root_path="/api"), None),
        ({"type": "lifespan"}, None),
    ],
)
def test_the_fast_path_takes_the_poll_the_create_and_the_catalog_only(scope: dict[str, Any], route: str | None) -> None:
    fast = FastPath(_poll, poll=_poll, create=_create, models=_models, metrics=ApiMetrics(), max_body_bytes=1000)
    chosen = fast._route(scope)
    names = {_poll: "poll", _create: "create", _models: "models"}
    assert (None if chosen is None else names[chosen[0]]) == route
    if route == "poll":
        assert scope["path_params"] == {"generation_id": scope["path"].rsplit("/", 1)[1]}

"""``ApiError`` from real error answers, and real responses parsed with the fields the client does not model."""

from __future__ import annotations

import uuid

import httpx
import pytest

from genworker_client import ApiError, Client, Generation, Model
from tests.client.conftest import FAST_MODEL, NEVER_RUNS_MODEL, Server
from tests.client.recording import RecordingTransport


def test_a_400_carries_code_message_param_and_status(server: Server) -> None:
    transport = RecordingTransport()
    with server.client(transport=transport) as client, pytest.raises(ApiError) as caught:
        client.create(FAST_MODEL, "x", resolution="720p")
    error = caught.value
    assert (error.status, error.param, error.attempts) == (400, "parameters.resolution", 1)
    assert error.code in {"invalid_parameter", "unsupported_parameter"}
    assert "720p" in error.message or "resolution" in error.message
    assert len(transport.exchanges) == 1, "a 400 is not retried"


def test_an_unknown_model_is_model_not_found(server: Server) -> None:
    with server.client() as client, pytest.raises(ApiError) as caught:
        client.create("no-such-model", "x")
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "model_not_found", "model")


def test_a_404_carries_code_message_param_and_status(server: Server) -> None:
    with server.client() as client, pytest.raises(ApiError) as caught:
        client.get("gen_does_not_exist")
    error = caught.value
    assert (error.status, error.code, error.param) == (404, "not_found", "id")
    assert "gen_does_not_exist" in error.message


def test_a_bad_key_is_a_401(server: Server) -> None:
    with Client(server.base_url, "not-a-real-key") as client, pytest.raises(ApiError) as caught:
        client.get("gen_anything")
    assert (caught.value.status, caught.value.code) == (401, "unauthenticated")
    assert "not-a-real-key" not in str(caught.value)


def test_real_generation_responses_have_fields_the_client_ignores(server: Server) -> None:
    """The server sends more than ``Generation`` models (queue_position, attempt, ...); parsing keeps going."""
    with server.client() as client:
        created = client.create(NEVER_RUNS_MODEL, f"fields {uuid.uuid4().hex}")
        raw = httpx.get(
            f"{server.base_url}/generations/{created.id}",
            headers={"Authorization": f"Bearer {server.api_key}"},
        ).json()
        parsed = client.get(created.id)
        client.cancel(created.id)
    unmodeled = set(raw) - set(Generation.model_fields)
    assert unmodeled, "the real record should carry fields this client does not model"
    assert parsed.id == raw["id"] and parsed.status == raw["status"] == "queued"
    assert parsed.price_hold is not None and parsed.price_hold.amount == raw["price_hold"]["amount"]
    assert parsed.parameters == raw["parameters"]


def test_models_lists_the_catalog(server: Server) -> None:
    with server.client() as client:
        models = {m.id: m for m in client.models()}
    assert {FAST_MODEL, NEVER_RUNS_MODEL} <= set(models)
    assert models[FAST_MODEL].available is True
    assert models[NEVER_RUNS_MODEL].available is False
    # Catalog fields beyond ``id``/``available`` are kept for callers that print them.
    extra = models[FAST_MODEL].model_extra or {}
    assert "resolutions" in extra and "144p" in extra["resolutions"]
    assert isinstance(models[FAST_MODEL], Model)


def test_models_needs_no_key(server: Server) -> None:
    with Client(server.base_url, api_key=None) as client:
        assert FAST_MODEL in {m.id for m in client.models()}

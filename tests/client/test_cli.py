"""``genworker client ...`` against the real server, key and URL from the environment only."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from genworker.cli import app
from genworker_client import Generation
from tests.client.conftest import FAST_MODEL, NEVER_RUNS_MODEL, Server

Invoke = Callable[..., Result]


@pytest.fixture
def run(server: Server) -> Invoke:
    runner = CliRunner()
    env = {"GENWORKER_BASE_URL": f"http://127.0.0.1:{server.port}", "GENWORKER_API_KEY": server.api_key}

    def invoke(*args: str) -> Result:
        return runner.invoke(app, ["client", *args], env=env)

    return invoke


def test_create_wait_download_get(run: Invoke, finished: Generation, tmp_path: Path) -> None:
    """The whole flow at the spec's default cadence (first poll after 5 s); ``finished`` warmed the model."""
    prompt = f"a paper boat {uuid.uuid4().hex}"
    result = run(
        "create", "--model", FAST_MODEL, "--prompt", prompt, "--variant", "fast", "--resolution", "144p",
        "--duration", "1", "--seed", "3", "--download", str(tmp_path / "a"),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    generation = out["generation"]
    assert generation["status"] == "succeeded"
    assert generation["parameters"]["seed"] == 3 and generation["input"]["prompt"] == prompt
    assert out["replayed"] is False and len(out["idempotency_key"]) == 32
    # The id reached stderr the moment it existed, before the wait.
    assert f"created {generation['id']}" in result.stderr
    files = [Path(f) for f in out["files"]]
    assert files[0].name == f"{generation['id']}-video.mp4"
    assert [f.stat().st_size for f in files] == [a["bytes"] for a in generation["artifacts"]]

    got = run("get", generation["id"])
    assert got.exit_code == 0, got.stderr
    assert json.loads(got.stdout)["id"] == generation["id"]

    again = run("download", generation["id"], str(tmp_path / "b"))
    assert again.exit_code == 0, again.stderr
    copies = [Path(f) for f in json.loads(again.stdout)["files"]]
    assert [c.read_bytes() for c in copies] == [f.read_bytes() for f in files]

    waited = run("wait", generation["id"], "--timeout", "5")
    assert waited.exit_code == 0, waited.stderr
    assert json.loads(waited.stdout)["status"] == "succeeded"


def test_create_then_cancel(run: Invoke) -> None:
    created = run("create", "--model", NEVER_RUNS_MODEL, "--prompt", "never runs")
    assert created.exit_code == 0, created.stderr
    generation_id = json.loads(created.stdout)["generation"]["id"]
    canceled = run("cancel", generation_id)
    assert canceled.exit_code == 0, canceled.stderr
    assert json.loads(canceled.stdout)["status"] == "canceled"
    again = run("cancel", generation_id)
    assert again.exit_code == 1
    assert json.loads(again.stderr)["error"]["code"] == "not_cancelable"


def test_wait_timeout_exits_3(run: Invoke) -> None:
    created = run("create", "--model", NEVER_RUNS_MODEL, "--prompt", "never runs either")
    generation_id = json.loads(created.stdout)["generation"]["id"]
    waited = run("wait", generation_id, "--timeout", "0.5")
    assert waited.exit_code == 3
    # The status the wait last saw on the live stream (its bar shows it too), not "unknown": the wait
    # followed the stream and polled no record.
    assert f"generation {generation_id} not terminal after 0.5 s (last status: queued)" in waited.stderr
    assert run("cancel", generation_id).exit_code == 0


def test_errors_are_json_on_stderr(run: Invoke) -> None:
    result = run("get", "gen_nope")
    assert result.exit_code == 1
    assert result.stdout == ""
    error = json.loads(result.stderr)["error"]
    assert (error["status"], error["code"], error["param"]) == (404, "not_found", "id")
    assert "gen_nope" in error["message"]
    bad = run("create", "--model", FAST_MODEL, "--prompt", "x", "--resolution", "720p")
    assert bad.exit_code == 1
    assert json.loads(bad.stderr)["error"]["param"] == "parameters.resolution"


def test_models_and_list(run: Invoke) -> None:
    models = run("models")
    assert models.exit_code == 0, models.stderr
    assert FAST_MODEL in {m["id"] for m in json.loads(models.stdout)}
    page = run("list", "--limit", "2")
    assert page.exit_code == 0, page.stderr
    body = json.loads(page.stdout)
    assert len(body["data"]) <= 2 and "next_cursor" in body

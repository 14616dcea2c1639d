"""One data directory: every relative state path resolves under ``data_dir``, and processes started from
different working directories with the same ``GENWORKER_DATA_DIR`` share one SQLite queue, one key store
and one local artifact store (real ``genworker`` processes, nothing in their working directories)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from foundation.settings import Settings, state_paths
from tests.e2e.conftest import create_body, free_port
from tests.e2e.test_embedded_mode import poll_until_terminal, wait_until_available


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GENWORKER_"):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_env")
def test_relative_state_paths_resolve_under_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path / "X"))
    assert settings.queue.sqlite_path == str(tmp_path / "X" / "queue.db")
    assert settings.store.local_root == str(tmp_path / "X" / "artifacts")  # not X/var/artifacts
    assert settings.models.tiny_models_dir == str(tmp_path / "X" / "models")
    placed = Settings(
        data_dir=str(tmp_path / "X"),
        queue={"sqlite_path": "q/jobs.db"},
        store={"local_root": "/srv/artifacts"},
        models={"tiny_models_dir": "~/tiny"},
    )
    assert placed.queue.sqlite_path == str(tmp_path / "X" / "q" / "jobs.db")
    assert placed.store.local_root == "/srv/artifacts"  # absolute paths are kept
    assert placed.models.tiny_models_dir == str(Path("~/tiny").expanduser())
    assert state_paths(placed)["queue"] == placed.queue.sqlite_path


@pytest.mark.usefixtures("clean_env")
def test_a_relative_data_dir_is_made_absolute_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GENWORKER_DATA_DIR", "state")
    settings = Settings()
    assert settings.data_dir == str(tmp_path / "state")
    assert settings.queue.sqlite_path == str(tmp_path / "state" / "queue.db")
    # Built again from its own values (what a child process receives), nothing moves.
    again = Settings.model_validate(settings.model_dump())
    assert (again.data_dir, again.queue.sqlite_path) == (settings.data_dir, settings.queue.sqlite_path)


def _genworker(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "genworker.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@pytest.mark.slow
def test_processes_in_different_directories_share_one_queue(tmp_path: Path, tiny_models_dir: Path) -> None:
    data = tmp_path / "shared-data"
    dirs = {name: tmp_path / name for name in ("keys-cwd", "api-cwd", "worker-cwd")}
    for d in dirs.values():
        d.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENWORKER_")}
    env |= {
        "HF_HUB_OFFLINE": "1",
        "GENWORKER_DATA_DIR": str(data),  # the only shared setting: SQLite queue, keys, local store
        "GENWORKER_MODELS__TINY_MODELS_DIR": str(tiny_models_dir),
        "GENWORKER_WORKER__HOSTED_MODELS": '["tiny-wan"]',
        "GENWORKER_API__POLL_FIRST_S": "1",
    }
    made = _genworker(
        "keys", "create", "--project", "p", "--scope", "generations:write", "--scope", "generations:read",
        cwd=dirs["keys-cwd"], env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert f"in {data / 'keys.db'}" in made.stderr  # it says where it wrote
    key = made.stdout.strip()

    port = free_port()
    env["GENWORKER_STORE__PUBLIC_BASE_URL"] = f"http://127.0.0.1:{port}"
    api_log, worker_log = (tmp_path / "api.log").open("wb"), (tmp_path / "worker.log").open("wb")
    api_cmd = [sys.executable, "-m", "genworker.cli", "api", "--port", str(port)]
    worker_cmd = [sys.executable, "-m", "genworker.cli", "worker"]
    api = subprocess.Popen(api_cmd, cwd=dirs["api-cwd"], env=env, stdout=api_log, stderr=subprocess.STDOUT)
    worker = subprocess.Popen(worker_cmd, cwd=dirs["worker-cwd"], env=env, stdout=worker_log, stderr=subprocess.STDOUT)
    api_log.close()
    worker_log.close()
    base_url = f"http://127.0.0.1:{port}"
    try:
        # The worker's heartbeat reaches the API only through the shared queue file.
        wait_until_available(base_url, api, "tiny-wan")
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
            created = c.post("/v1/generations", json=create_body(duration_seconds=1))
            assert created.status_code == 202, created.text
            final = poll_until_terminal(c, created.json()["id"])
            assert final["status"] == "succeeded", final.get("error")
            video = next(a for a in final["artifacts"] if a["kind"] == "video")
            # Uploaded by the worker, served by the API: one local store under the data dir.
            assert c.get(video["download_url"]).status_code == 200
    finally:
        assert _stop(worker) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        assert _stop(api) == 0, (tmp_path / "api.log").read_text()[-3000:]
    assert (data / "queue.db").is_file() and (data / "keys.db").is_file()
    assert any((data / "artifacts").rglob("video.mp4"))
    for d in dirs.values():
        assert list(d.iterdir()) == [], f"{d.name} got files: nothing is written to the working directory"
    for log in ("api.log", "worker.log"):  # each process says where it keeps its state
        assert f'"queue": "{data / "queue.db"}"' in (tmp_path / log).read_text()

"""``genworker fleet``'s env file: written by ``init``, read like docker/systemd env files, and refused
before anything starts when it cannot describe a one-machine fleet."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from genworker.errors import FleetError
from genworker.fleet import fleet_settings, init_env_file, read_env_file


def test_init_writes_a_private_file_that_describes_a_loopback_fleet(tmp_path: Path) -> None:
    path = tmp_path / "fleet.env"
    init_env_file(path, redis_port=7001, s3_port=7002, api_port=7003)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the S3 secret
    values = read_env_file(path)
    settings = fleet_settings(values)
    assert settings.queue.redis_url == "redis://127.0.0.1:7001/0"
    assert settings.store.s3_endpoint_url == "http://127.0.0.1:7002"
    assert settings.api.port == 7003
    assert settings.worker.hosted_models == ["tiny-wan", "tiny-ltx2"]
    assert settings.data_dir == str(tmp_path / "var-fleet")
    assert settings.webhooks.secret_key is not None  # the API refuses to start on Redis without it
    with pytest.raises(FleetError, match="exists"):
        init_env_file(path)


def test_the_callers_environment_does_not_leak_into_the_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "fleet.env"
    init_env_file(path)
    monkeypatch.setenv("GENWORKER_QUEUE__BACKEND", "sqlite")
    assert fleet_settings(read_env_file(path)).queue.backend == "redis"
    assert os.environ["GENWORKER_QUEUE__BACKEND"] == "sqlite"  # restored


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("GENWORKER_QUEUE__BACKEND=sqlite", "redis-server"),
        ("GENWORKER_STORE__BACKEND=local", "SeaweedFS"),
        ("GENWORKER_QUEUE__REDIS_URL=redis://10.0.0.5:6379/0", "127.0.0.1"),
        ("GENWORKER_STORE__S3_ENDPOINT_URL=http://127.0.0.1", "port"),
    ],
)
def test_a_file_that_cannot_run_on_one_machine_is_refused(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "fleet.env"
    init_env_file(path)
    with path.open("a") as f:
        f.write(line + "\n")
    with pytest.raises(FleetError, match=why):
        fleet_settings(read_env_file(path))


def test_a_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match="genworker fleet init"):
        read_env_file(tmp_path / "nope.env")

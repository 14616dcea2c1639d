"""A bad ``GENWORKER_*`` value is told in one line per bad field, naming the setting and its variable, and every
command exits 2 on it; the traceback shows only with ``--debug``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from foundation.settings import Settings, load_settings
from foundation.settings.problems import settings_problems
from tests.integration.worker_harness import free_port

GENWORKER = Path(sys.executable).with_name("genworker")


def _problems(monkeypatch: pytest.MonkeyPatch, **env: str) -> list[str]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises((ValidationError, SettingsError)) as caught:
        load_settings()
    return settings_problems(caught.value, Settings)


def test_a_list_that_is_not_json(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _problems(monkeypatch, GENWORKER_WEBHOOKS__ALLOWED_HOSTS="nonsense") == [
        "bad setting webhooks.allowed_hosts (GENWORKER_WEBHOOKS__ALLOWED_HOSTS): 'nonsense' is not JSON; "
        """write it as JSON, e.g. '["a", "b"]'"""
    ]


def test_every_bad_field_in_one_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _problems(monkeypatch, GENWORKER_QUEUE__BACKEND="nope", GENWORKER_WEBHOOKS__ALLOWED_HOSTS='["127.0.0.1"]')
    assert lines == [
        "bad setting queue.backend (GENWORKER_QUEUE__BACKEND): Input should be 'sqlite' or 'redis', not 'nope'",
        "bad setting webhooks.allowed_hosts (GENWORKER_WEBHOOKS__ALLOWED_HOSTS): '127.0.0.1' must name a host and a "
        "port, e.g. images.internal:8080, 127.0.0.1:9000 or [::1]:8443 (host:* for every port of the host)",
    ]


def test_other_errors_are_not_settings_problems() -> None:
    assert settings_problems(ValueError("no"), Settings) == []


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GENWORKER), *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "command",
    [["up"], ["worker"], ["api"], ["weights", "verify", "wan2.1-t2v-14b"]],
    ids=lambda c: c[0],
)
def test_every_command_says_it_in_a_line_and_exits_2(command: list[str], tmp_path: Path) -> None:
    if command == ["up"]:
        command = ["up", "--port", str(free_port())]  # a free port: a taken one is refused before settings load
    result = _run(*command, GENWORKER_WEBHOOKS__ALLOWED_HOSTS="nonsense", GENWORKER_DATA_DIR=str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    assert len(lines) <= 3, lines
    assert lines[0].startswith("genworker: bad setting webhooks.allowed_hosts (GENWORKER_WEBHOOKS__ALLOWED_HOSTS)")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = _run("--debug", "worker", GENWORKER_QUEUE__BACKEND="nope", GENWORKER_DATA_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "Traceback" in result.stderr or "ValidationError" in result.stderr
    assert "literal_error" in result.stderr

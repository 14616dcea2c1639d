"""``genworker client`` prints stable error codes on stderr, never Python class names."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when we return: nothing listens there


def _client(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GENWORKER_API_KEY": "gw_" + "x" * 43}
    cmd = [sys.executable, "-m", "genworker.cli", "client", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)


def test_an_unreachable_service_is_reported_as_transport_failed() -> None:
    done = _client("get", "gen_0123", "--base-url", f"http://127.0.0.1:{_closed_port()}/v1")
    assert done.returncode == 1
    error = json.loads(done.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "transport_failed" and "no answer" in error["message"]


def test_a_bad_argument_is_reported_as_invalid_argument() -> None:
    done = _client("get", "gen_0123", "--base-url", "not a url")
    assert done.returncode == 1
    error = json.loads(done.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "invalid_argument"
    assert not error["code"][0].isupper()  # never a class name such as ValueError

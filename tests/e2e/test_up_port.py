"""``genworker up`` (and ``make up PORT=...``) on a port that is taken: said first, before the models,
the key and the banner, with exit status 2 and nothing written."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def test_a_taken_port_is_reported_before_anything_is_built_or_printed(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        cmd = [sys.executable, "-m", "genworker.cli", "up", "--port", str(port), "--data-dir", str(data)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ), check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # no banner, no key
    assert f"127.0.0.1:{port}" in done.stderr and "--port" in done.stderr and "make up PORT=" in done.stderr
    assert not data.exists()  # no models built, no key made

"""A real Prometheus (Debian's ``prometheus`` package) on a free loopback port, stopped by PID.

``make deps`` installs it; a machine without the binary fails the test that needs it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.integration.worker_harness import free_port

START_TIMEOUT_S = 30.0


class PrometheusServer:
    def __init__(self, config: Path, workdir: Path) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not installed: run `make deps` (Debian package prometheus)"
        self.port = free_port()
        self.log_path = workdir / "prometheus.log"
        self.cmd = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._get("/-/ready") is not None:
                return self
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready within {START_TIMEOUT_S}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return bytes(resp.read())
        except (urllib.error.URLError, OSError):
            return None

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = self._get(f"/api/v1/{path}{query}")
        assert body is not None, f"prometheus did not answer /api/v1/{path}:\n{self.log_tail()}"
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]

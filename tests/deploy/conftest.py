"""What tests/deploy reports at the end of the run: the security scanner's counts (``make test`` shows them
after the results, whether the scan passed or failed)."""

from __future__ import annotations

from typing import Any

SCAN_REPORT: list[str] = []  # lines written by tests/deploy/test_security_scan.py


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SCAN_REPORT:
        terminalreporter.section("security scan")
        for line in SCAN_REPORT:
            terminalreporter.write_line(line)

"""Shutdown signals: the first SIGTERM/SIGINT drains, a second one stops at once.

Python runs signal handlers in the main thread only, between bytecodes. The daemon therefore keeps
its main thread free (it waits on events) and runs jobs in a GPU thread, so a second signal is
handled at once even while a CUDA kernel or a long C call holds the GPU thread.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

__all__ = ["Shutdown"]

log = logging.getLogger("genworker.lifecycle")


class Shutdown:
    """Two events: ``draining`` (stop claiming, finish or release) and ``stop_now`` (exit at once)."""

    def __init__(self) -> None:
        self.draining = threading.Event()
        self.stop_now = threading.Event()
        self.drain_started: float | None = None

    def install(self) -> None:
        """Handle SIGTERM and SIGINT (main thread only)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def request_drain(self, reason: str) -> None:
        if not self.draining.is_set():
            self.drain_started = time.monotonic()
            log.info("draining: no new jobs; running work may finish", extra={"reason": reason})
            self.draining.set()

    def request_stop(self, reason: str) -> None:
        self.request_drain(reason)
        if not self.stop_now.is_set():
            log.info("stopping now: running work is released", extra={"reason": reason})
            self.stop_now.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.draining.is_set():
            self.request_stop(f"second {name}")
        else:
            self.request_drain(name)

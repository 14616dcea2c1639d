"""The worker's structured logs: job id and model bound, one line per stage.

The format itself (one JSON object per line) is ``foundation.core.logs``, shared with the API. Prompts,
negative prompts and signed URLs are never logged at INFO: they are customer data and credentials.

The daemon writes its lines from a thread of their own (``write_logs_in_background``): a line logged
between a claim and the model's start (``claimed``, a resident model's ``loading``) costs the GPU
thread the record and an append, not the JSON, the write, nor waking the writer (a futex wake and,
on an idle VM, an interrupt to a halted core). What that buys the daemon's pick-up, against lines
written in place in the same run: docs/benchmarks.md, "Micro-optimizations, A/B (issue 37)". The
writer wakes on its own every ``WRITE_EVERY_S``, and at once for a warning or an error, and writes what
has come in the order it was logged. An exit, forced or not, writes what is queued; a process killed
outright loses the INFO lines of its last ``WRITE_EVERY_S`` at most, and a reader of another worker's
output waits for a line rather than assume it is there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

from foundation.core.logs import JsonFormatter, configure_logging

__all__ = ["JobLogger", "JsonFormatter", "configure_logging", "job_logger", "log_stage", "write_logs_in_background"]


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger with job fields bound; per-call ``extra`` adds to them instead of replacing them."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        bound: Mapping[str, object] = self.extra or {}
        kwargs["extra"] = {**bound, **(kwargs.get("extra") or {})}
        return msg, kwargs


def job_logger(job_id: str, model: str, attempt: int, name: str = "genworker.job") -> JobLogger:
    return JobLogger(logging.getLogger(name), {"job_id": job_id, "model": model, "attempt": attempt})


@contextmanager
def log_stage(log: logging.Logger | JobLogger, stage: str) -> Iterator[None]:
    """Log one line when ``stage`` ends, with its elapsed milliseconds and whether it raised."""
    started = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        log.info("stage %s %s", stage, "done" if ok else "stopped", extra={"stage": stage, "elapsed_ms": elapsed_ms})


# How often the writer thread wakes to write what has been logged (an idle worker: 20 cheap wake-ups a
# second); a warning or an error wakes it at once.
WRITE_EVERY_S = 0.05


class _Handoff(logging.Handler):
    """Takes records on the thread that logs them, with the message merged with its arguments (the line
    says what they were when it was logged), into a deque: no lock, and no wake-up below WARNING. The
    writer thread hands them to ``handlers`` (the root's own) every ``WRITE_EVERY_S`` or when woken;
    closing it (``logging.shutdown``, at exit or a forced exit) stops the writer and writes what is left."""

    def __init__(self, handlers: list[logging.Handler]) -> None:
        super().__init__()
        self._handlers = handlers
        self._records: deque[logging.LogRecord] = deque()  # append and popleft are atomic
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._writer = threading.Thread(target=self._write_until_closed, name="log-writer", daemon=True)
        self._writer.start()

    def handle(self, record: logging.LogRecord) -> bool:  # no handler lock: a deque append
        if not self.filter(record):
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            record.msg, record.args = record.getMessage(), None
        except Exception:  # a message its arguments do not fit: logging's own report, not a crash
            self.handleError(record)
            return
        self._records.append(record)
        if record.levelno >= logging.WARNING:
            self._wake.set()  # an operator (or an alert) waits for these: written now, with what came before

    def _write_until_closed(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(WRITE_EVERY_S)
            self._wake.clear()  # a wake-up set after this finds its line in the pass below
            self._write()
        self._write()

    def _write(self) -> None:
        records = self._records
        while records:
            record = records.popleft()
            for handler in self._handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)

    def close(self) -> None:
        if not self._stopped.is_set():
            self._stopped.set()
            self._wake.set()
            if self._writer is not threading.current_thread():
                self._writer.join()  # its last pass writes what is queued, in order
            self._write()  # lines logged while it stopped
        super().close()


def write_logs_in_background(logger: logging.Logger | None = None) -> None:
    """Put the handlers of ``logger`` (the root's: ``configure_logging``'s) behind one writer thread,
    which writes the lines in the order they were logged."""
    logger = logger or logging.getLogger()
    logger.handlers[:] = [_Handoff(list(logger.handlers))]

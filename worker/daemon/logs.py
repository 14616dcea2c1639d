"""The worker's structured logs: job id and model bound, one line per stage.

The format itself (one JSON object per line) is ``worker.core.logs``, shared with the API. Prompts,
negative prompts and signed URLs are never logged at INFO: they are customer data and credentials.

The daemon writes its lines from a thread of their own (``write_logs_in_background``): a line logged
between a claim and the model's start (``claimed``, a resident model's ``loading``) costs the GPU
thread the record only, not the JSON and the write. An exit, forced or not, writes what is queued; a
process killed outright loses the lines not yet written, which the writer takes as soon as the GPU
thread lets go of the interpreter (a torch call, a queue call), so the last few at most.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from logging.handlers import QueueHandler, QueueListener
from typing import Any

from worker.core.logs import JsonFormatter, configure_logging

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


class _Handoff(QueueHandler):
    """Hands records to the writer thread as they are (one process: nothing is pickled, the exception is
    formatted there). The message is merged with its arguments here, so the line says what they were
    when it was logged. Closing it (``logging.shutdown``, at exit or a forced exit) writes what is queued."""

    def __init__(self, records: queue.SimpleQueue[logging.LogRecord | None], listener: QueueListener) -> None:
        super().__init__(records)
        self._listener = listener

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record.msg, record.args = record.getMessage(), None
        return record

    def close(self) -> None:
        if self._listener._thread is not None:  # stop() twice would fail
            self._listener.stop()
        super().close()


def write_logs_in_background(logger: logging.Logger | None = None) -> None:
    """Put the handlers of ``logger`` (the root's: ``configure_logging``'s) behind a queue and one writer
    thread, which writes the lines in the order they were logged."""
    logger = logger or logging.getLogger()
    records: queue.SimpleQueue[logging.LogRecord | None] = queue.SimpleQueue()
    listener = QueueListener(records, *logger.handlers, respect_handler_level=True)
    logger.handlers[:] = [_Handoff(records, listener)]
    listener.start()

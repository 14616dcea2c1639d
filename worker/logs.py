"""The worker's structured logs: job id and model bound, one line per stage.

The format itself (one JSON object per line) is ``foundation.core.logs``, shared with the API. Prompts,
negative prompts and signed URLs are never logged at INFO: they are customer data and credentials.

Each line is written by the thread that logs it, before the call returns (logging's stream handler
flushes every record): a worker killed outright has written every line it logged. A writer thread of
their own saved the GPU thread a fraction of a millisecond per line and lost the last lines on a kill;
docs/benchmarks.md, "Micro-optimizations off by default (issue 48)", has what removing it cost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

from foundation.core.logs import JsonFormatter, configure_logging

__all__ = ["JobLogger", "JsonFormatter", "configure_logging", "job_logger", "log_stage"]


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

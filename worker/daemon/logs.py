"""Structured JSON logs: one object per line, job id and model bound, one line per stage.

Stdlib ``logging`` only, so library logs (diffusers, botocore) come out in the same format. Prompts,
negative prompts and signed URLs are never logged at INFO: they are customer data and credentials.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

__all__ = ["JobLogger", "JsonFormatter", "configure_logging", "job_logger", "log_stage"]

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is emitted.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: ts, level, logger, msg, then the bound fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO") -> None:
    """Route every logger to stderr as JSON lines (idempotent: replaces the root handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Chatty libraries stay at WARNING so the worker's lifecycle lines remain readable.
    for name in ("urllib3", "botocore", "boto3", "s3transfer", "httpx", "diffusers", "transformers", "PIL"):
        logging.getLogger(name).setLevel(logging.WARNING)


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

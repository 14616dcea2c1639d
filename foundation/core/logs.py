"""The one log format of every genworker process: JSON objects, one per line, on stderr.

Stdlib ``logging`` only, so library logs (uvicorn, diffusers, botocore) come out in the same format.
Fields passed with ``extra=`` (a job id, a request id) become top-level keys. The worker
(``worker.logs`` binds job fields) and the API (``api.access_log`` writes one line per request)
both configure it here, so an operator's log pipeline parses one format.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "configure_logging"]

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is emitted
# (except uvicorn's ``color_message``: the message again, with terminal colour codes).
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}

# Chatty libraries stay at WARNING so the lifecycle and access lines remain readable.
_QUIET = ("urllib3", "botocore", "boto3", "s3transfer", "httpx", "diffusers", "transformers", "PIL")


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
    # The format has no caller, thread or process fields, so a record need not look them up (the
    # logging docs' "Optimization": without this every call walks the stack with sys._getframe).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)

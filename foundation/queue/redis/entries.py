"""The payload of a job stream entry (Redis) and what makes an entry unreadable.

An entry only points at a record: ``{"v": 1, "job_id": ..., "model": ...}`` in the field
``payload``. Anything else (not JSON, another shape, unknown fields, a model that is not the
stream's, a record that does not exist) is dead-lettered with a reason and acknowledged.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from foundation.queue.errors import UnreadableEntry

__all__ = ["PAYLOAD_FIELD", "EntryPayload", "UnreadableEntry", "encode_payload", "read_payload"]

PAYLOAD_FIELD = "payload"


class EntryPayload(BaseModel):
    # Strict: an entry written by something else than this protocol is refused, not half-read.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    v: Literal[1] = 1
    job_id: str = Field(min_length=1, max_length=200)
    model: str = Field(min_length=1, max_length=200)


def encode_payload(job_id: str, model: str) -> str:
    """``EntryPayload(job_id=..., model=...).model_dump_json()``: the same compact JSON (``claim.lua``
    matches it byte for byte), written by ``json``. A create runs this cold, right after a request's
    wake-up, where building and serializing the model costs more. Ids and model names are checked where
    their keys are built (``keys``); the reader validates every payload (``read_payload``)."""
    return json.dumps({"v": 1, "job_id": job_id, "model": model}, ensure_ascii=False, separators=(",", ":"))


def read_payload(fields: dict[str, str], stream_model: str) -> EntryPayload:
    """Parse an entry's fields; raise ``UnreadableEntry`` with a short reason."""
    unknown = sorted(set(fields) - {PAYLOAD_FIELD})
    if unknown:
        raise UnreadableEntry(f"unknown entry fields {unknown}")
    raw = fields.get(PAYLOAD_FIELD)
    if raw is None:
        raise UnreadableEntry("entry has no payload field")
    try:
        payload = EntryPayload.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        kind = "not JSON" if first["type"] == "json_invalid" else f"wrong schema ({where}: {first['msg']})"
        raise UnreadableEntry(f"payload {kind}") from None
    if payload.model != stream_model:
        raise UnreadableEntry(f"payload model {payload.model!r} is not this stream's {stream_model!r}", payload.job_id)
    return payload

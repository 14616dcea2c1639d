"""A stream entry's payload, written by hand (``encode_payload``), is what ``EntryPayload`` writes and reads."""

from __future__ import annotations

import pytest

from foundation.queue import keys
from foundation.queue.redis.entries import EntryPayload, encode_payload


@pytest.mark.parametrize("job_id", ["gen_0f3a", "a", "A-z_0.9:/@+=-" * 15, "x" * 200])
def test_an_entry_payload_is_entrypayloads_own_json(job_id: str) -> None:
    assert keys.job_model_index(job_id)  # an id the queue's keys allow
    for model in ("wan-2.5", "ltx-2:fast/@+=", "m" * 200):
        written = encode_payload(job_id, model)
        assert written == EntryPayload(job_id=job_id, model=model).model_dump_json()
        assert EntryPayload.model_validate_json(written) == EntryPayload(job_id=job_id, model=model)

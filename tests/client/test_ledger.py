"""The key ledger and the download sink: small file-backed pieces, tested on a temp directory."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker_client.download import ArtifactSink, artifact_paths, needs_fresh_url
from genworker_client.errors import IntegrityError
from genworker_client.ledger import KeyLedger, LedgerConflict, choose_idempotency_key, fingerprint
from genworker_client.models import Artifact, Generation

BODY = {"model": "tiny-wan", "mode": "text_to_video", "variant": "standard", "parameters": {}, "input": {"prompt": "x"}}


def test_reserve_writes_the_key_to_disk_before_returning(tmp_path: Path) -> None:
    ledger = KeyLedger(tmp_path / "keys.json")
    entry = ledger.reserve("clip-1", BODY)
    on_disk = json.loads((tmp_path / "keys.json").read_text())
    assert on_disk["clip-1"] == {"idempotency_key": entry.idempotency_key, "body_sha256": fingerprint(BODY), "id": None}
    # A new process (a new ledger object on the same file) gets the same key back.
    assert KeyLedger(tmp_path / "keys.json").reserve("clip-1", dict(BODY)).idempotency_key == entry.idempotency_key
    assert ledger.reserve("clip-2", BODY).idempotency_key != entry.idempotency_key


def test_a_name_reused_with_another_body_is_refused(tmp_path: Path) -> None:
    ledger = KeyLedger(tmp_path / "keys.json")
    ledger.reserve("clip", BODY)
    with pytest.raises(LedgerConflict, match="clip"):
        ledger.reserve("clip", {**BODY, "input": {"prompt": "y"}})


def test_record_id_then_choose_returns_the_known_id(tmp_path: Path) -> None:
    ledger = KeyLedger(tmp_path / "keys.json")
    key = ledger.reserve("clip", BODY).idempotency_key
    ledger.record_id("clip", "gen_42")
    entry = choose_idempotency_key(BODY, idempotency_key=None, name="clip", ledger=ledger)
    assert (entry.idempotency_key, entry.id) == (key, "gen_42")


def test_choose_without_a_ledger(tmp_path: Path) -> None:
    assert choose_idempotency_key(BODY, idempotency_key="mine", name=None, ledger=None).idempotency_key == "mine"
    fresh = {
        choose_idempotency_key(BODY, idempotency_key=None, name=None, ledger=None).idempotency_key for _ in range(3)
    }
    assert len(fresh) == 3
    with pytest.raises(ValueError, match="ledger"):
        choose_idempotency_key(BODY, idempotency_key=None, name="clip", ledger=None)
    with pytest.raises(ValueError, match="ledger"):
        choose_idempotency_key(BODY, idempotency_key="k", name="clip", ledger=KeyLedger(tmp_path / "k.json"))


def _artifact(data: bytes, **overrides: object) -> Artifact:
    fields: dict[str, object] = {"kind": "video", "content_type": "video/mp4", "bytes": len(data)}
    fields["sha256"] = hashlib.sha256(data).hexdigest()
    fields.update(overrides)
    return Artifact.model_validate(fields)


def test_sink_commits_only_a_matching_file(tmp_path: Path) -> None:
    data = b"\x00\x01" * 1000
    dest = tmp_path / "out" / "v.mp4"
    with ArtifactSink(dest, _artifact(data)) as sink:
        sink.write(data[:700])
        sink.write(data[700:])
        sink.commit()
    assert dest.read_bytes() == data
    assert list(dest.parent.iterdir()) == [dest]


@pytest.mark.parametrize(
    ("overrides", "what"), [({"bytes": 3}, "size"), ({"sha256": "0" * 64}, "sha256")], ids=["size", "sha256"]
)
def test_sink_refuses_a_mismatch_and_leaves_nothing(tmp_path: Path, overrides: dict[str, object], what: str) -> None:
    dest = tmp_path / "v.mp4"
    with pytest.raises(IntegrityError) as caught, ArtifactSink(dest, _artifact(b"abcd", **overrides)) as sink:
        sink.write(b"abcd")
        sink.commit()
    assert caught.value.what == what
    assert list(tmp_path.iterdir()) == []


def test_sink_without_metadata_accepts_the_bytes(tmp_path: Path) -> None:
    dest = tmp_path / "v.bin"
    with ArtifactSink(dest, Artifact(kind="video")) as sink:
        sink.write(b"xyz")
        sink.commit()
    assert dest.read_bytes() == b"xyz"


def test_artifact_file_names(tmp_path: Path) -> None:
    generation = Generation.model_validate(
        {
            "id": "gen_1",
            "artifacts": [
                {"kind": "video", "content_type": "video/mp4"},
                {"kind": "poster", "content_type": "image/jpeg"},
                {"kind": "video", "download_url": "http://h/a/b.webm?sig=1"},
                {"kind": "thumb"},
            ],
        }
    )
    names = [p.name for p in artifact_paths(generation, tmp_path)]
    assert names == ["gen_1-video.mp4", "gen_1-poster.jpg", "gen_1-video-1.webm", "gen_1-thumb.bin"]


def test_needs_fresh_url() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    url = "http://h/f?sig=1"
    assert needs_fresh_url(Artifact(download_url=None), now=now)
    assert not needs_fresh_url(Artifact(download_url=url), now=now)
    assert not needs_fresh_url(Artifact(download_url=url, expires_at=now + timedelta(seconds=1)), now=now)
    assert needs_fresh_url(Artifact(download_url=url, expires_at=now), now=now)
    assert needs_fresh_url(Artifact(download_url=url, expires_at=now.replace(tzinfo=None)), now=now)

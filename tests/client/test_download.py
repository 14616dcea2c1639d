"""Downloads against the real server's signed URLs: verified files, and expired URLs refreshed.

Signed URLs live ``URL_TTL_S`` (2 s) on the test server, so "expired" is a short sleep away.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from genworker_client import ApiError, AsyncClient, Generation
from tests.client.conftest import FAST_MODEL, URL_TTL_S, Server
from tests.client.recording import RecordingTransport

MAGIC = {"video": (4, b"ftyp"), "poster": (0, b"\xff\xd8\xff")}


def check_files(paths: list[Path], generation: Generation) -> None:
    assert len(paths) == len(generation.artifacts)
    for path, artifact in zip(paths, generation.artifacts, strict=True):
        data = path.read_bytes()
        assert len(data) == artifact.bytes
        assert hashlib.sha256(data).hexdigest() == artifact.sha256
        offset, magic = MAGIC[artifact.kind]
        assert data[offset : offset + len(magic)] == magic, f"{path.name} is not a {artifact.kind}"
        assert not path.with_name(path.name + ".part").exists()


def stale_urls(generation: Generation) -> set[str]:
    return {a.download_url for a in generation.artifacts if a.download_url}


def test_download_streams_and_verifies_every_artifact(server: Server, finished: Generation, tmp_path: Path) -> None:
    with server.client() as client:
        fresh = client.get(finished.id)
        paths = client.download(fresh, tmp_path / "out")
    assert [p.parent for p in paths] == [tmp_path / "out"] * len(paths)
    assert paths[0].name == f"{finished.id}-video.mp4"
    check_files(paths, fresh)


def test_an_expired_url_is_refreshed_transparently(server: Server, finished: Generation, tmp_path: Path) -> None:
    with server.client() as client:
        old = client.get(finished.id)
    expiry = max(a.expires_at for a in old.artifacts if a.expires_at)
    assert expiry <= datetime.now(UTC) + timedelta(seconds=URL_TTL_S + 1)
    time.sleep(max(0.0, (expiry - datetime.now(UTC)).total_seconds()) + 0.3)
    # The server really refuses the old URL now.
    refused = httpx.get(old.artifacts[0].download_url or "", timeout=10)
    assert refused.status_code == 403, refused.status_code

    transport = RecordingTransport()
    with server.client(transport=transport) as client:
        paths = client.download(old, tmp_path)
    check_files(paths, old)
    # The record's expiry told the client before it tried: it re-fetched the record first.
    assert transport.exchanges[0].url.path == f"/v1/generations/{old.id}"
    fetched = {str(e.url) for e in transport.exchanges[1:]}
    assert fetched.isdisjoint(stale_urls(old))
    assert all(e.status == 200 for e in transport.exchanges)


def test_a_refused_url_is_retried_once_with_a_fresh_one(server: Server, finished: Generation, tmp_path: Path) -> None:
    """The clock path cannot see every expiry (a skewed clock, a revoked signature): a 403 from the
    store also makes the client re-fetch the generation and retry with the fresh URL."""
    with server.client() as client:
        old = client.get(finished.id)
    # Wait past the URLs' real expiry (the store rounds it up to a whole second), not just the TTL.
    latest = max(a.expires_at for a in old.artifacts if a.expires_at is not None)
    time.sleep(max(URL_TTL_S, (latest - datetime.now(UTC)).total_seconds()) + 1.1)
    # Same stale URLs, but an expires_at that claims they are still good: only the 403 can tell.
    lying = old.model_copy(deep=True)
    for artifact in lying.artifacts:
        artifact.expires_at = datetime.now(UTC) + timedelta(hours=1)

    transport = RecordingTransport()
    with server.client(transport=transport) as client:
        paths = client.download(lying, tmp_path)
    check_files(paths, old)
    first = transport.exchanges[:3]
    assert (str(first[0].url), first[0].status) == (old.artifacts[0].download_url, 403)
    assert (first[1].url.path, first[1].status) == (f"/v1/generations/{old.id}", 200)
    assert first[2].status == 200 and str(first[2].url) not in stale_urls(old)


def test_a_url_with_a_bad_signature_is_replaced_by_a_fresh_one(
    server: Server, finished: Generation, tmp_path: Path
) -> None:
    with server.client() as client:
        good = client.get(finished.id)
    broken = good.model_copy(deep=True)
    broken.artifacts[0].download_url = (good.artifacts[0].download_url or "") + "0"
    transport = RecordingTransport()
    with server.client(transport=transport) as client:
        paths = client.download(broken, tmp_path)
    check_files(paths, good)
    assert [e.status for e in transport.exchanges[:3]] == [403, 200, 200]
    # One re-fetch, and its URLs served the remaining artifacts too.
    assert sum(e.url.path == f"/v1/generations/{good.id}" for e in transport.exchanges) == 1
    assert len(transport.exchanges) == 2 + len(good.artifacts)


def test_a_missing_object_is_an_error_and_leaves_no_file(server: Server, finished: Generation, tmp_path: Path) -> None:
    """A signed URL that is valid but whose object is gone (404) is not an expiry: no re-fetch, an
    ``ApiError`` for the caller, and no partial file on disk."""
    with server.client() as client:
        created = client.create(FAST_MODEL, f"doomed {uuid.uuid4().hex}", variant="fast", resolution="144p")
        done = client.wait(created, timeout_s=180, first_poll_s=0.5, poll_min_s=0.5, poll_max_s=1.0)
        assert done.status == "succeeded", done.error
        stored = [p for p in server.data_dir.rglob("*") if p.is_file() and f"generations/{done.id}/" in p.as_posix()]
        assert len(stored) == len(done.artifacts), stored
        for path in stored:
            path.unlink()
        transport = RecordingTransport()
        with server.client(transport=transport) as observed, pytest.raises(ApiError) as caught:
            observed.download(done, tmp_path)
    assert caught.value.status == 404
    assert [e.status for e in transport.exchanges] == [404]
    assert list(tmp_path.iterdir()) == []


def test_download_of_an_unfinished_generation_is_refused(server: Server, tmp_path: Path) -> None:
    queued = Generation.model_validate({"id": "gen_x", "status": "queued"})
    with server.client() as client, pytest.raises(ValueError, match="queued"):
        client.download(queued, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_download_by_id_of_an_unknown_generation_is_a_404(server: Server, tmp_path: Path) -> None:
    with server.client() as client, pytest.raises(ApiError) as caught:
        client.download("gen_does_not_exist", tmp_path)
    assert (caught.value.status, caught.value.code) == (404, "not_found")


def test_async_client_waits_refreshes_and_downloads(server: Server, finished: Generation, tmp_path: Path) -> None:
    """The asyncio twin on the same paths: wait, a refused URL (403) and an expired one (clock)."""

    async def scenario() -> tuple[Generation, list[Path], list[Path]]:
        async with AsyncClient(server.base_url, server.api_key) as client:
            done = await client.wait(finished.id, timeout_s=10, first_poll_s=0.1)
            tampered = done.model_copy(deep=True)
            tampered.artifacts[0].download_url = (done.artifacts[0].download_url or "") + "0"
            refused_path = await client.download(tampered, tmp_path / "refused")
            await asyncio.sleep(URL_TTL_S + 0.3)
            expired_path = await client.download(done, tmp_path / "expired")
            return done, refused_path, expired_path

    done, refused_paths, expired_paths = asyncio.run(scenario())
    assert done.status == "succeeded"
    check_files(refused_paths, done)
    check_files(expired_paths, done)

"""Poll following Retry-After while a worker peer runs the job, then download through signed URLs.

The peer is real: it claims through the queue protocol, encodes an MP4 with the project's encoder,
uploads it to the local store and finishes the attempt, exactly the calls a worker makes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import av
import httpx
import numpy as np
import pytest

from foundation.core.contract import Status, Usage
from foundation.core.media import Media
from foundation.media.encoder import EncoderSettings, encode_video
from foundation.queue.base import Claim, Outcome
from foundation.stores.base import artifact_key, claim_tag
from tests.e2e.conftest import Stack, add_keys, assert_error, create_body, start_stack


def claim_job(stack: Stack, job_id: str) -> Claim:
    claim = stack.queue.claim("e2e-peer", ["tiny-wan"], block_s=0)
    assert claim is not None and claim.job_id == job_id
    return claim


def finish_with_video(stack: Stack, claim: Claim, work: Path) -> None:
    """Encode a short noise clip at the record's size and finish the attempt with it."""
    p = claim.record.parameters
    width, height, fps = 256, 144, 4  # tiny-wan at 144p 16:9
    frames = (p.duration_seconds or 1) * fps
    rng = np.random.default_rng(p.seed)

    def chunks() -> Iterator[np.ndarray]:
        yield rng.integers(0, 256, size=(frames, height, width, 3), dtype=np.uint8)

    media = Media(width=width, height=height, fps=fps, num_frames=frames, chunks=chunks())
    encoded = encode_video(
        media,
        keep_frames=frames,
        width=width,
        height=height,
        out_dir=work,
        settings=EncoderSettings(codec="libx264", preset="ultrafast"),
    )
    artifacts = []
    for artifact, path in encoded.artifacts():
        key = artifact_key(claim.job_id, claim.attempt, claim_tag(claim.token, claim.record.updated_at), path.name)
        stack.store.put_file(key, path, content_type=artifact.content_type, sha256=artifact.sha256)
        artifacts.append(artifact.model_copy(update={"key": key}))
    outcome = Outcome(
        status=Status.succeeded,
        artifacts=artifacts,
        usage=Usage(output_seconds=float(p.duration_seconds or 1), gpu_seconds=0.1),
        price=claim.record.price_hold,
    )
    assert stack.queue.finish(claim, outcome)


def poll(client: httpx.Client, gid: str, on_each: list[dict]) -> dict:
    """Poll as the spec asks: wait what Retry-After says, stop at a terminal status."""
    while True:
        r = client.get(f"/v1/generations/{gid}")
        assert r.status_code == 200, r.text
        g = r.json()
        on_each.append({"status": g["status"], "retry_after": r.headers.get("Retry-After")})
        if g["status"] in ("succeeded", "failed", "canceled"):
            return g
        time.sleep(int(r.headers["Retry-After"]))


def test_poll_then_download_through_fresh_signed_urls(fresh_stack: Stack, tmp_path: Path) -> None:
    stack = fresh_stack
    with stack.client("alpha") as c:
        created = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": "dl-1"})
        gid = created.json()["id"]
        queued = c.get(f"/v1/generations/{gid}")
        assert queued.json()["status"] == "queued"
        assert queued.json()["queue_position"] == 0
        assert int(queued.headers["Retry-After"]) >= 1

        claim = claim_job(stack, gid)
        running = c.get(f"/v1/generations/{gid}")
        assert running.json()["status"] == "running"
        assert running.json()["queue_position"] is None
        assert "Retry-After" in running.headers
        finish_with_video(stack, claim, tmp_path / "work")

        seen: list[dict] = []
        final = poll(c, gid, seen)
        assert final["status"] == "succeeded"
        assert seen[-1]["retry_after"] is None  # no hint once terminal
        assert final["price"] == final["price_hold"]

        # Signatures cover (key, expiry in whole seconds): a GET in a later second must re-sign.
        time.sleep(1.1)
        second = c.get(f"/v1/generations/{gid}").json()
    first_video = next(a for a in final["artifacts"] if a["kind"] == "video")
    second_video = next(a for a in second["artifacts"] if a["kind"] == "video")
    assert all("key" not in a for a in final["artifacts"])  # raw store keys stay private
    # Freshly signed on every GET: a different URL for the same object, with a later expiry.
    assert first_video["download_url"] != second_video["download_url"]
    assert second_video["expires_at"] > first_video["expires_at"]
    assert datetime.fromisoformat(first_video["expires_at"]) > datetime.fromisoformat(final["created_at"])

    with httpx.Client(timeout=30) as anon:  # signed URLs need no API key
        for artifact in (first_video, second_video):
            r = anon.get(artifact["download_url"])
            assert r.status_code == 200
            assert r.headers["content-type"] == "video/mp4"
            assert hashlib.sha256(r.content).hexdigest() == artifact["sha256"]
            assert len(r.content) == artifact["bytes"]
        path = tmp_path / "downloaded.mp4"
        path.write_bytes(r.content)
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            decoded = sum(1 for _ in container.decode(stream))
            assert (stream.codec_context.width, stream.codec_context.height) == (256, 144)
        assert decoded == first_video["frames"] == 4
        poster = next(a for a in final["artifacts"] if a["kind"] == "poster")
        assert hashlib.sha256(anon.get(poster["download_url"]).content).hexdigest() == poster["sha256"]

        tampered = first_video["download_url"].replace("sig=", "sig=0")
        assert anon.get(tampered).status_code == 403


def test_expired_url_is_refused(tmp_path: Path) -> None:
    """An API replica whose store signs URLs for 1 s: the URL works, then stops working."""
    stack = start_stack(tmp_path / "api", url_ttl_s=1)
    add_keys(stack)
    try:
        with stack.client("alpha") as c:
            gid = c.post("/v1/generations", json=create_body()).json()["id"]
            finish_with_video(stack, claim_job(stack, gid), tmp_path / "work")
            video = c.get(f"/v1/generations/{gid}").json()["artifacts"][0]
        expires_at = datetime.fromisoformat(video["expires_at"]).timestamp()
        # That URLs work before expiry is shown above; here only what happens after it.
        time.sleep(max(0.0, expires_at - time.time()) + 1.1)
        with httpx.Client(timeout=30) as anon:
            expired = anon.get(video["download_url"])
        assert expired.status_code == 403
        assert expired.json()["error"]["code"]
    finally:
        stack.stop()


def test_cancel_of_a_running_generation_sets_the_flag_and_a_finished_one_is_409(fresh_stack: Stack) -> None:
    stack = fresh_stack
    with stack.client("alpha") as c:
        gid = c.post("/v1/generations", json=create_body()).json()["id"]
        claim = claim_job(stack, gid)
        r = c.post(f"/v1/generations/{gid}/cancel")
        assert r.status_code == 200, r.text
        assert (r.json()["status"], r.json()["cancel_requested"]) == ("running", True)
        assert stack.queue.cancel_requested(gid)
        assert stack.queue.finish(claim, Outcome(status=Status.canceled))
        assert c.get(f"/v1/generations/{gid}").json()["status"] == "canceled"
        assert_error(c.post(f"/v1/generations/{gid}/cancel"), 409, "not_cancelable")


@pytest.mark.parametrize("status", [Status.succeeded, Status.failed])
def test_terminal_generation_is_not_cancelable(fresh_stack: Stack, status: Status, tmp_path: Path) -> None:
    from foundation.core.contract import ErrorInfo
    from foundation.core.errors import ErrorCode

    stack = fresh_stack
    with stack.client("alpha") as c:
        gid = c.post("/v1/generations", json=create_body()).json()["id"]
        claim = claim_job(stack, gid)
        if status is Status.succeeded:
            finish_with_video(stack, claim, tmp_path / "work")
        else:
            error = ErrorInfo(code=ErrorCode.pipeline_error, message="model code raised")
            assert stack.queue.finish(claim, Outcome(status=Status.failed, error=error))
        assert_error(c.post(f"/v1/generations/{gid}/cancel"), 409, "not_cancelable")
        g = c.get(f"/v1/generations/{gid}").json()
        assert g["status"] == status.value
        if status is Status.failed:
            # The served message is the code's public sentence, not what the worker wrote.
            assert g["error"] == {"code": "pipeline_error", "message": "the model failed while generating"}
            assert g["artifacts"] == []

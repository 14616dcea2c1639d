"""``GET /v1/models`` as an anonymous client: the catalog, live availability and depth, no secrets; cheap
to serve (no write to the queue, the body computed at most once a second, an ETag and a max-age)."""

from __future__ import annotations

import sqlite3
import time

import httpx

from api.routes.models import REFRESH_S
from foundation.queue.base import WorkerHeartbeat
from tests.e2e.conftest import Stack, create_body
from tests.integration.worker_harness import wait_until


def models(stack: Stack) -> dict[str, dict]:
    with httpx.Client(base_url=stack.base_url) as anon:
        r = anon.get("/v1/models")
    assert r.status_code == 200, r.text
    return {m["id"]: m for m in r.json()["data"]}


def test_models_need_no_key_and_describe_the_catalog(fresh_stack: Stack) -> None:
    listed = models(fresh_stack)
    assert set(listed) == set(fresh_stack.catalog.models)
    wan = listed["tiny-wan"]
    spec = fresh_stack.catalog.models["tiny-wan"]
    assert wan["family"] == "wan"
    assert wan["modes"]["text_to_video"]["variants"]["fast"]["rate_multiplier"] == "0.5"
    assert (wan["resolutions"], wan["durations"], wan["fps"]) == (spec.resolutions, spec.durations, spec.fps)
    assert wan["rates"] == {"currency": "USD", "per_second": {"144p": "0.01", "240p": "0.02"}, "audio_per_second": "0"}
    assert (wan["audio"], wan["prompt_extend"]) == (False, True)
    assert listed["tiny-ltx2"]["audio"] is True
    assert listed["tiny-ltx2"]["rates"]["audio_per_second"] == "0.005"


PUBLIC_FIELDS = {
    "id", "object", "display_name", "family", "modes", "resolutions", "ratios", "durations", "defaults", "fps",
    "audio", "prompt_extend", "prompt_max_chars", "rates", "available", "queue_depth",
}  # fmt: skip


def test_models_leak_no_weights_paths_or_adapters(fresh_stack: Stack) -> None:
    with httpx.Client(base_url=fresh_stack.base_url) as anon:
        r = anon.get("/v1/models")
    for model in r.json()["data"]:
        assert set(model) == PUBLIC_FIELDS
        for mode in model["modes"].values():
            assert set(mode["variants"]["standard"]) == {"steps", "rate_multiplier", "available"}
    text = r.text
    for spec in fresh_stack.catalog.models.values():
        assert spec.adapter not in text
        if not spec.tiny:  # a tiny model's weights dir is named like its id
            assert spec.weights not in text
            loras = [v.lora for m in spec.modes.values() for v in m.variants.values() if v.lora is not None]
            assert not any(lora.weights in text or lora.weight_name in text for lora in loras)
        if spec.prompt_extend and spec.prompt_extend.llm:
            assert spec.prompt_extend.llm not in text
    for leak in ("Wan-AI/", "Lightricks/", "Qwen/", "var/models", "pipelines.", "http"):
        assert leak not in text


def test_availability_follows_live_heartbeats_and_depth_counts_queued(fresh_stack: Stack) -> None:
    before = models(fresh_stack)
    assert not any(m["available"] for m in before.values())
    assert before["tiny-wan"]["queue_depth"] == 0
    with fresh_stack.client("alpha") as c:
        for _ in range(3):
            assert c.post("/v1/generations", json=create_body()).status_code == 202
    beat = WorkerHeartbeat(worker_id="e2e-worker", hosted_models=["tiny-wan"], ready=True)
    fresh_stack.queue.heartbeat(beat, ttl_s=60)
    changed_at = time.monotonic()
    # The body is up to REFRESH_S old: the change shows within it, whatever the machine's load adds.
    wait_until(lambda: models(fresh_stack)["tiny-wan"]["available"], "the heartbeat to show", timeout_s=10 * REFRESH_S)
    assert time.monotonic() - changed_at < 10 * REFRESH_S
    after = models(fresh_stack)
    assert after["tiny-ltx2"]["available"] is False
    assert after["tiny-wan"]["queue_depth"] == 3
    assert after["tiny-ltx2"]["queue_depth"] == 0


def test_the_catalog_writes_nothing_so_a_busy_writer_cannot_hold_it(fresh_stack: Stack) -> None:
    """An anonymous call must not queue behind the queue's writers: with another connection holding
    SQLite's write lock, the catalog still answers (it used to open a write transaction per call and
    wait out the lock)."""
    fresh_stack.queue.heartbeat(WorkerHeartbeat(worker_id="w", hosted_models=["tiny-wan"], ready=True), ttl_s=60)
    writer = sqlite3.connect(fresh_stack.settings.queue.sqlite_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        with httpx.Client(base_url=fresh_stack.base_url, timeout=5) as anon:
            answer = anon.get("/v1/models")
        assert answer.status_code == 200
        assert {m["id"]: m for m in answer.json()["data"]}["tiny-wan"]["available"] is True
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_the_catalog_has_an_etag_a_304_and_a_max_age(fresh_stack: Stack) -> None:
    with httpx.Client(base_url=fresh_stack.base_url) as anon:
        first = anon.get("/v1/models")
        etag = first.headers["ETag"]
        assert first.headers["Cache-Control"] == "max-age=3" and etag.startswith('"')
        again = anon.get("/v1/models", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == etag
        assert anon.get("/v1/models", headers={"If-None-Match": '"other", ' + etag}).status_code == 304
        assert anon.get("/v1/models", headers={"If-None-Match": '"other"'}).status_code == 200
        with fresh_stack.client("alpha") as c:
            assert c.post("/v1/generations", json=create_body()).status_code == 202
        # A change makes a new body and a new tag; the old tag then gets the whole body.
        wait_until(lambda: anon.get("/v1/models").headers["ETag"] != etag, "a new ETag", timeout_s=10 * REFRESH_S)
        changed = anon.get("/v1/models", headers={"If-None-Match": etag})
        assert changed.status_code == 200 and changed.json()["data"]

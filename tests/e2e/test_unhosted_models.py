"""A model in the catalog that no worker hosts: refused with a coded 400 in embedded mode (it would wait
for ever behind the one worker), accepted in distributed mode (a worker may be started for it) or when
``api.unhosted_models`` says ``accept``. Real uvicorn over real SQLite and Redis queues."""

from __future__ import annotations

from pathlib import Path

from foundation.queue.base import WorkerHeartbeat
from tests.e2e.conftest import add_keys, assert_error, create_body, start_stack
from tests.integration.worker_harness import wait_until

UNHOSTED = "wan2.1-t2v-1.3b"  # in the catalog, not in the default worker.hosted_models


def _post(stack, model: str):  # type: ignore[no-untyped-def]
    with stack.client("alpha") as c:
        return c.post("/v1/generations", json=create_body(model=model, resolution="480p"))


def test_embedded_mode_refuses_a_model_no_worker_hosts(tmp_path: Path) -> None:
    stack = start_stack(tmp_path / "api")
    try:
        add_keys(stack)
        error = assert_error(_post(stack, UNHOSTED), 400, "invalid_parameter", "model")
        assert UNHOSTED in error["message"] and "tiny-wan" in error["message"]
        assert stack.queue.depth(UNHOSTED) == 0  # no trace: nothing enqueued, no price held
        with stack.client("alpha") as c:
            assert c.post("/v1/generations", json=create_body()).status_code == 202  # a hosted one
        # A worker that says (by heartbeat) it hosts the model makes it acceptable.
        beat = WorkerHeartbeat(worker_id="gpu-1", hosted_models=[UNHOSTED], ready=True)
        stack.queue.heartbeat(beat, ttl_s=60)
        assert _post(stack, UNHOSTED).status_code == 202
    finally:
        stack.stop()


def test_embedded_mode_accepts_it_when_told_to(tmp_path: Path) -> None:
    stack = start_stack(tmp_path / "api", api={"unhosted_models": "accept"})
    try:
        add_keys(stack)
        assert _post(stack, UNHOSTED).status_code == 202
    finally:
        stack.stop()


def test_distributed_mode_accepts_it_for_scale_from_zero(tmp_path: Path, redis_url: str) -> None:
    stack = start_stack(tmp_path / "api", redis_url=redis_url)
    try:
        add_keys(stack)
        created = _post(stack, UNHOSTED)
        assert created.status_code == 202 and created.json()["status"] == "queued"
        refusing = start_stack(tmp_path / "api2", redis_url=redis_url, api={"unhosted_models": "refuse"})
        try:
            add_keys(refusing)
            assert_error(_post(refusing, UNHOSTED), 400, "invalid_parameter", "model")
        finally:
            refusing.stop()
    finally:
        stack.stop()


def test_a_variant_whose_weights_no_live_worker_has_is_neither_available_nor_accepted(tmp_path: Path) -> None:
    """Workers leave a variant out of their heartbeat when its LoRA is missing on their node
    (``unserved_variants``): the catalog shows it unavailable and embedded mode refuses its jobs (param
    ``variant``) until a worker that has it beats."""
    model = "wan2.1-t2v-14b"  # its `distilled` variant runs with lightx2v's LoRA
    stack = start_stack(tmp_path / "api")
    try:
        add_keys(stack)
        lacking = WorkerHeartbeat(
            worker_id="gpu-1",
            hosted_models=[model],
            unserved_variants={model: ["text_to_video/distilled"]},
            ready=True,
        )
        stack.queue.heartbeat(lacking, ttl_s=60)

        def variants() -> dict[str, bool]:
            with stack.client("alpha") as c:
                listed = {m["id"]: m for m in c.get("/v1/models").json()["data"]}[model]
            assert listed["available"] is True
            return {name: v["available"] for name, v in listed["modes"]["text_to_video"]["variants"].items()}

        assert variants() == {"standard": True, "fast": True, "cached": True, "distilled": False}
        with stack.client("alpha") as c:
            distilled = create_body(model=model, resolution="480p") | {"variant": "distilled"}
            error = assert_error(c.post("/v1/generations", json=distilled), 400, "invalid_parameter", "variant")
            assert "'distilled'" in error["message"] and stack.queue.depth(model) == 0
            assert c.post("/v1/generations", json=create_body(model=model, resolution="480p")).status_code == 202
            # A second worker that has the LoRA: the variant is available and accepted.
            stack.queue.heartbeat(WorkerHeartbeat(worker_id="gpu-2", hosted_models=[model], ready=True), ttl_s=60)
            assert c.post("/v1/generations", json=distilled).status_code == 202
        # The catalog's body is up to a second old (api/routes/models.py): the new beat shows within it.
        want = {"standard": True, "fast": True, "cached": True, "distilled": True}
        wait_until(lambda: variants() == want, "the second worker's variants to show", timeout_s=10)
    finally:
        stack.stop()

"""Resume mid-denoise, exactly: for each family (Wan 2.1, Wan 2.2 two experts, LTX-2 with audio, one and two
stages, and the generic adapter on SkyReels-V2) a run that resumes from a checkpoint taken at step k gives
the latents and media of the uninterrupted run bit for bit, while its denoisers run only the steps after k.

Checkpoints go through their bytes (``to_bytes`` / ``from_bytes``) as they do through a store. The kill -9
and SIGTERM versions, with a real worker and store, are in tests/integration/test_worker_crash.py.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from foundation.core.catalog import Catalog, CheckpointPolicy
from foundation.core.resolve import ResolvedJob
from foundation.stores.local import LocalStore
from pipelines.errors import CheckpointCorrupt, CheckpointMismatch
from pipelines.runtime.adapter import Adapter, Latents
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.resume import DenoiseCheckpoint
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import MemoryCheckpoints, StepLog, frames_of
from tests.pipelines.i2v_support import fitted, i2v_job
from worker.checkpoints import DrainClock, JobCheckpoints, checkpoint_key
from worker.logs import job_logger
from worker.metrics import WorkerMetrics
from worker.pipeline_run import RunHooks, run_pipeline


class _Forwards:
    """Counts the denoisers' real forwards: a hook on their output projection, which a skipped forward never
    reaches (a hook on the transformer itself fires on every call, skipped or not)."""

    def __init__(self, pipe: Any) -> None:
        self.count = 0
        self._handles = [
            module.proj_out.register_forward_hook(self._seen)
            for name in ("transformer", "transformer_2")
            if (module := getattr(pipe, name, None)) is not None
        ]

    def _seen(self, *_: Any) -> None:
        self.count += 1

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def _tensors(latents: Latents) -> dict[str, torch.Tensor]:
    return {k: v for k, v in vars(latents).items() if isinstance(v, torch.Tensor)}


def _run(
    adapter: Adapter, job: ResolvedJob, checkpoints: MemoryCheckpoints | None, **conditioning: Any
) -> tuple[Latents, int, StepLog]:
    pipe = adapter.pipe  # type: ignore[attr-defined]
    forwards = _Forwards(pipe)
    steps = StepLog()
    try:
        latents = adapter.denoise(job, steps, checkpoints=checkpoints, **conditioning)  # type: ignore[call-arg]
    finally:
        forwards.close()
    return latents, forwards.count, steps


def _check_resumes(
    adapter: Adapter, job: ResolvedJob, resume_steps: list[int], *, learn_forwards: int = 0, **conditioning: Any
) -> MemoryCheckpoints:
    """Run ``job`` once with a checkpoint after every step, then resume from each of ``resume_steps``:
    identical latents (every tensor, the generator state included) and frames, and fewer forwards (plus
    ``learn_forwards``: an adapter without its own zero output learns the shape by one real forward)."""
    stored = MemoryCheckpoints(every=1)
    full, full_forwards, full_steps = _run(adapter, job, stored, **conditioning)
    total = len(full_steps.calls)
    assert sorted(stored.stored) == list(range(1, total + 1))
    assert full.resumed_from_step is None
    reference = adapter.decode(full, job)
    reference_frames = frames_of(reference)
    per_step = full_forwards / total
    for k in resume_steps:
        resume = MemoryCheckpoints(every=10**6, resume_at=k, stored=stored.stored)
        latents, forwards, steps = _run(adapter, job, resume, **conditioning)
        assert resume.refusals == [] and resume.resumes == [(k, total)]
        assert latents.resumed_from_step == k
        for name, tensor in _tensors(full).items():
            assert torch.equal(_tensors(latents)[name], tensor), (k, name)
        media = adapter.decode(latents, job)
        np.testing.assert_array_equal(frames_of(media), reference_frames)
        if reference.audio is not None:
            assert media.audio is not None
            np.testing.assert_array_equal(media.audio.samples, reference.audio.samples)
        assert forwards == per_step * (total - k) + learn_forwards, (k, forwards, full_forwards)
        assert steps.calls == [(i, total) for i in range(1, total + 1)]  # progress still counts every step
    return stored


def test_wan21_resumes_exactly(model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    adapter = model_cache.get(catalog.models["tiny-wan"])
    job = make_job("tiny-wan", ratio="1:1", duration_seconds=1).model_copy(update={"steps": 6})
    assert job.guidance_scale > 1.0  # CFG on: two forwards a step, both skipped while replaying
    _check_resumes(adapter, job, [1, 3, 5, 6])


def test_wan22_two_experts_resume_on_either_side_of_the_switch(model_cache: ModelCache, catalog: Catalog) -> None:
    adapter = model_cache.get(catalog.models["tiny-wan-i2v-a14b"])
    job = i2v_job(catalog, "tiny-wan-i2v-a14b", variant="standard").model_copy(update={"steps": 6})
    stored = _check_resumes(adapter, job, [1, 2, 4], image=fitted(job, 3))
    experts = {k: DenoiseCheckpoint.from_bytes(stored.stored[k]).expert for k in (1, 2, 4)}
    # Resumed on the high-noise expert and on the low-noise one (boundary 0.9 with shift 5.0 switches early).
    assert experts[1] == "transformer" and experts[4] == "transformer_2", experts


@pytest.mark.parametrize("model", ["tiny-ltx2", "tiny-ltx2-two-stage", "tiny-ltx2.5"])
def test_ltx2_with_audio_resumes_exactly(
    model: str, model_cache: ModelCache, catalog: Catalog, make_job: MakeJob
) -> None:
    adapter = model_cache.get(catalog.models[model])
    job = make_job(model, audio=True)
    total = job.steps + (len(catalog.models[model].two_stage.refine_sigmas) if catalog.models[model].two_stage else 0)
    # One stage: early and last step. Two stages: in stage 1, at its end, and in stage 2 (stage 1 skipped).
    steps = [1, total] if total == job.steps else [1, job.steps, job.steps + 1, total]
    stored = _check_resumes(adapter, job, steps)
    if total != job.steps:
        assert set(DenoiseCheckpoint.from_bytes(stored.stored[total]).carried) == {"stage1_video", "stage1_audio"}


def test_the_generic_adapter_resumes_exactly(model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    adapter = model_cache.get(catalog.models["tiny-skyreels-v2"])
    assert adapter.resumable  # type: ignore[attr-defined]  # SkyReelsV2Pipeline has a step callback
    job = make_job("tiny-skyreels-v2").model_copy(update={"steps": 4})
    _check_resumes(adapter, job, [1, 3], learn_forwards=1)


def test_a_checkpoint_of_another_job_catalog_entry_or_weights_is_refused_and_the_job_starts_over(
    model_cache: ModelCache, catalog: Catalog, make_job: MakeJob
) -> None:
    adapter = model_cache.get(catalog.models["tiny-wan"])
    job = make_job("tiny-wan", ratio="1:1", duration_seconds=1)
    stored = MemoryCheckpoints(every=1)
    _, full_forwards, _ = _run(adapter, job, stored)
    other_seed = job.model_copy(update={"seed": job.seed + 1})
    other_catalog = adapter.spec.model_copy(update={"negative_prompt": "another catalog version"})
    first_weight = next(adapter.pipe.transformer.parameters())  # type: ignore[attr-defined]
    for changed_job, spec, nudge in (
        (other_seed, adapter.spec, 0.0),
        (job, other_catalog, 0.0),
        (job, adapter.spec, 1e-3),
    ):
        original, adapter.spec = adapter.spec, spec  # type: ignore[misc]
        saved = first_weight.detach().view(-1)[0].clone()
        with torch.no_grad():
            first_weight.view(-1)[0] += nudge  # other weights behind the same catalog entry
        try:
            resume = MemoryCheckpoints(every=10**6, resume_at=2, stored=stored.stored)
            latents, forwards, _ = _run(adapter, changed_job, resume)
            fresh, _, _ = _run(adapter, changed_job, None)
        finally:
            adapter.spec = original  # type: ignore[misc]
            with torch.no_grad():
                first_weight.view(-1)[0] = saved  # exactly as loaded: the model is the session's
        assert resume.refusals == ["fingerprint"] and resume.resumes == []
        assert latents.resumed_from_step is None and forwards == full_forwards  # started over: every step ran
        assert torch.equal(latents.video, fresh.video)  # type: ignore[attr-defined]  # and correctly


def test_corrupt_checkpoints_do_not_parse() -> None:
    good = DenoiseCheckpoint(
        fingerprint="f", step=1, total=2, samples=[[torch.zeros(2)]], schedulers=[{"_step_index": 1}]
    ).to_bytes()
    assert DenoiseCheckpoint.from_bytes(good).step == 1
    for bad in (b"", b"not a checkpoint", good[:-10], good[:12] + b"\x00" * 40):
        with pytest.raises(CheckpointCorrupt):
            DenoiseCheckpoint.from_bytes(bad)


def test_a_checkpoint_of_another_loop_version_is_refused_and_the_job_starts_over(
    model_cache: ModelCache, catalog: Catalog, make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.families.wan as wan

    adapter = model_cache.get(catalog.models["tiny-wan"])
    job = make_job("tiny-wan", ratio="1:1", duration_seconds=1).model_copy(update={"steps": 4})
    stored = MemoryCheckpoints(every=1)
    full, full_forwards, _ = _run(adapter, job, stored)
    # A worker of the next version of the loop (a rolling upgrade) meets this version's checkpoint.
    monkeypatch.setattr(wan, "LOOP_VERSION", wan.LOOP_VERSION + 1)
    resume = MemoryCheckpoints(every=10**6, resume_at=2, stored=stored.stored)
    latents, forwards, _ = _run(adapter, job, resume)
    assert resume.refusals == ["fingerprint"] and resume.resumes == []
    assert latents.resumed_from_step is None and forwards == full_forwards
    assert torch.equal(latents.video, full.video)  # type: ignore[attr-defined]


def _tampered(data: bytes, how: str) -> bytes:
    """A checkpoint of this very job (its fingerprint untouched) whose contents no longer fit its loop."""
    checkpoint = DenoiseCheckpoint.from_bytes(data)
    sample = checkpoint.samples[0][0]
    assert sample is not None
    state = dict(checkpoint.schedulers[0])
    if how == "sample shape":
        samples = [[torch.zeros((*sample.shape[:2], sample.shape[2] + 1, *sample.shape[3:]))]]
        checkpoint = replace(checkpoint, samples=samples)
    elif how == "sample dtype":
        checkpoint = replace(checkpoint, samples=[[sample.to(torch.float64)]])
    elif how == "scheduler steps":  # a loop that stepped its scheduler twice a step
        checkpoint = replace(checkpoint, samples=checkpoint.samples * 2, schedulers=checkpoint.schedulers * 2)
    elif how == "scheduler attribute":
        del state["sigmas"]
        checkpoint = replace(checkpoint, schedulers=[state])
    elif how == "scheduler tensor":
        state["sigmas"] = {"tensor": state["sigmas"]["tensor"][:-1], "cpu": True}
        checkpoint = replace(checkpoint, schedulers=[state])
    elif how == "generator":
        assert checkpoint.generator is not None
        checkpoint = replace(checkpoint, generator=checkpoint.generator[:-8])
    elif how == "step index":  # laid out right, a value no loop can continue from
        state["_step_index"] = 10**6
        checkpoint = replace(checkpoint, schedulers=[state])
    else:
        raise AssertionError(how)
    return checkpoint.to_bytes()


TAMPERINGS = [
    "sample shape",
    "sample dtype",
    "scheduler steps",
    "scheduler attribute",
    "scheduler tensor",
    "generator",
    "step index",
]


@pytest.mark.parametrize("how", TAMPERINGS)
def test_a_checkpoint_of_this_job_that_does_not_fit_its_loop_is_refused_at_the_restore(
    how: str, model_cache: ModelCache, catalog: Catalog, make_job: MakeJob
) -> None:
    adapter = model_cache.get(catalog.models["tiny-wan"])
    job = make_job("tiny-wan", ratio="1:1", duration_seconds=1).model_copy(update={"steps": 4})
    stored = MemoryCheckpoints(every=1)
    _run(adapter, job, stored)
    bad = {2: _tampered(stored.stored[2], how)}
    resume = MemoryCheckpoints(every=10**6, resume_at=2, stored=bad)
    with pytest.raises(CheckpointMismatch) as raised:
        _run(adapter, job, resume)
    assert resume.refusals == [] and resume.resumes in ([], [(2, 4)]), (how, raised.value)


class _WorkerHooks(RunHooks):
    """What the daemon's run hands a resumable adapter: its ``JobCheckpoints`` on a real local store."""

    def __init__(self, checkpoints: JobCheckpoints) -> None:
        self._checkpoints = checkpoints
        self.steps: list[tuple[int, int]] = []

    def on_step(self, done: int, total: int) -> None:
        self.steps.append((done, total))

    def checkpoints(self) -> JobCheckpoints:
        return self._checkpoints


@pytest.mark.parametrize("how", ["sample shape", "step index"])
def test_the_worker_deletes_a_checkpoint_that_does_not_fit_and_runs_the_job_from_step_0_in_the_same_attempt(
    how: str, model_cache: ModelCache, catalog: Catalog, make_job: MakeJob, tmp_path: Path
) -> None:
    """The checkpoint has the job's fingerprint, so it is restored, and the restore finds it unusable: today's
    ``pipeline_error`` would fail the job for the worker's own leftovers. The run starts over instead."""
    spec = catalog.models["tiny-wan"]
    job = make_job("tiny-wan", ratio="1:1", duration_seconds=1).model_copy(update={"steps": 4})
    store = LocalStore(tmp_path / "artifacts", b"0123456789abcdef0123", "http://127.0.0.1:1", 60)
    (tmp_path / "work").mkdir()
    metrics = WorkerMetrics()
    drain = DrainClock(threading.Event(), threading.Event(), lambda: None)

    def attempt_checkpoints() -> JobCheckpoints:
        log = job_logger("gen_mismatch", spec.id, 1)
        policy = CheckpointPolicy(every_steps=1, every_s=None)
        return JobCheckpoints(
            store, "gen_mismatch", spec.id, policy, metrics=metrics, log=log, drain=drain,
            finish_margin_s=1.0, work_root=tmp_path / "work",
        )  # fmt: skip

    fresh = run_pipeline(model_cache, spec, job, RunHooks())
    taken = MemoryCheckpoints(every=1)
    _run(model_cache.get(spec), job, taken)
    planted = tmp_path / "planted.ckpt"
    planted.write_bytes(_tampered(taken.stored[2], how))
    store.put_file(checkpoint_key("gen_mismatch"), planted, content_type="application/octet-stream")

    checkpoints = attempt_checkpoints()
    hooks = _WorkerHooks(checkpoints)
    rendered = run_pipeline(model_cache, spec, job, hooks)
    checkpoints.close()
    assert rendered.resumed_from_step is None and checkpoints.resumed_from_step is None
    np.testing.assert_array_equal(frames_of(rendered.media), frames_of(fresh.media))  # from step 0, correctly
    assert hooks.steps[-4:] == [(1, 4), (2, 4), (3, 4), (4, 4)]  # the second run went through every step
    assert (
        metrics.registry.get_sample_value(
            "genworker_checkpoints_refused_total", {"model": spec.id, "reason": "mismatch"}
        )
        == 1
    )
    # The unusable checkpoint is gone: what is stored now is the second run's own, at its last step.
    stored = attempt_checkpoints().load()
    assert stored is not None and stored.step == 4

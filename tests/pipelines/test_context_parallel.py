"""One job across two processes (``models.gpus_per_job = 2``, ``pipelines.runtime.context_parallel``) on CPU with gloo.

This process is rank 0; rank 1 is a real ``genworker worker`` follower started as torchrun would start it
(``RANK``/``WORLD_SIZE``/``MASTER_*``). Tiny Wan under diffusers' Ulysses context parallel gives the same latents
as the single-process model, each rank's blocks see half the video tokens, and a job stopped at a step by rank 0
(a cancel) stops the follower at that step too: the next job is exact again, which a follower out of step would
break (a collective mismatch, or a wait until the group's timeout).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import Catalog
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime import context_parallel
from pipelines.runtime.cache import ModelCache
from tests.pipelines.conftest import MakeJob

ROOT = Path(__file__).resolve().parents[2]
_GROUP_TIMEOUT = timedelta(seconds=90)  # forming the group (the follower imports diffusers) and each collective


class _Canceled(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def follower(tmp_path: Path, tiny_runtime: ModelRuntimeSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Rank 1 as a ``genworker worker`` process; this test process joins as rank 0."""
    torchrun = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2"}
    env = os.environ | torchrun | {"RANK": "1", "LOCAL_RANK": "1"}
    env |= {
        "GENWORKER_DATA_DIR": str(tmp_path),
        "GENWORKER_MODELS__DEVICE": "cpu",
        "GENWORKER_MODELS__TINY_MODELS_DIR": tiny_runtime.tiny_models_dir,
        "GENWORKER_MODELS__GPUS_PER_JOB": "2",
    }
    log = (tmp_path / "follower.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "genworker", "worker"], cwd=ROOT, env=env, stdout=log, stderr=log)
    for name, value in torchrun.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    try:
        yield proc
    finally:
        context_parallel.leave()  # tells a live follower to stop; a no-op once left
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


# diffusers' context-parallel gather calls a torch function deprecated in this torch: not ours to fix.
@pytest.mark.filterwarnings("ignore:`torch.distributed._functional_collectives.all_gather_tensor` is deprecated")
def test_two_gloo_ranks_match_one_process_and_stop_together(
    follower: Any, model_cache: ModelCache, tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    spec = catalog.models["tiny-wan"]
    job = make_job("tiny-wan", resolution="144p", ratio="16:9", duration_seconds=1).model_copy(update={"steps": 3})
    single = model_cache.get(spec).denoise(job, lambda done, total: None).video  # type: ignore[attr-defined]

    group = context_parallel.join(2, timeout=_GROUP_TIMEOUT)
    assert (group.rank, group.size, context_parallel.job_gpus()) == (0, 2, 2)
    adapter = context_parallel.load_across_gpus(spec, tiny_runtime.model_copy(update={"gpus_per_job": 2}))
    assert not adapter.resumable
    tokens: list[int] = []
    adapter.pipe.transformer.blocks[1].register_forward_pre_hook(lambda _m, args: tokens.append(args[0].shape[1]))

    parallel = adapter.denoise(job, lambda done, total: None).video  # type: ignore[attr-defined]
    assert (parallel - single).abs().max().item() < 1e-5
    latent_tokens = single.shape[2] * (single.shape[3] // 2) * (single.shape[4] // 2)  # patch 1x2x2
    assert set(tokens) == {latent_tokens // 2}  # each rank's blocks hold half the video tokens

    def cancel_at_2(done: int, total: int) -> None:
        if done == 2:
            raise _Canceled  # the worker's cancel and drain checks raise from this callback

    with pytest.raises(_Canceled):
        adapter.denoise(job.model_copy(update={"seed": 7}), cancel_at_2)

    again = adapter.denoise(job, lambda done, total: None).video  # type: ignore[attr-defined]
    assert (again - single).abs().max().item() < 1e-5  # the follower stopped at step 2 as well
    adapter.unload()
    context_parallel.leave()
    assert follower.wait(timeout=30) == 0

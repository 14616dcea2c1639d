"""FLOPs of denoising counted on meta copies of the real denoisers (``pipelines.runtime.flops``): equal to what torch
counts on the real run, not counting the calls a resume replays, and at Wan 2.1 14B 720p equal to the
closed-form transformer count within 1 %."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from foundation.core.catalog import Catalog
from pipelines.planning.mfu import achieved, peak_tflops
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.flops import DenoiseFlops, _meta_model, forward_flops
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import MemoryCheckpoints, StepLog

ARCH = Path(__file__).resolve().parents[2] / "configs" / "arch"


def test_meta_count_equals_torchs_count_of_the_real_run(
    model_cache: ModelCache, catalog: Catalog, make_job: MakeJob
) -> None:
    """Op by op, the meta copies count what torch counts on the real run. The real CPU run's attention kernel
    (``_scaled_dot_product_flash_attention_for_cpu``) has no FLOP formula in torch, so torch misses it there;
    on meta, attention decomposes into ``bmm`` and is counted (its size is checked in the 14B test below)."""
    adapter = model_cache.get(catalog.models["tiny-wan"])
    pipe = adapter.pipe  # type: ignore[attr-defined]
    job = make_job("tiny-wan", ratio="1:1", duration_seconds=1)
    flops = DenoiseFlops()
    with FlopCounterMode(display=False) as real, flops.recording(pipe):
        latents = adapter.denoise(job, StepLog())
    assert flops.calls == job.steps * 2  # CFG: conditional and unconditional forwards
    # The adapter records the same calls itself and returns them with the latents (what the worker reads).
    reported = latents.stats.flops
    assert reported is not None and reported.snapshot() == flops.snapshot()
    real_ops = {str(op): n for op, n in real.get_flop_counts()[type(pipe.transformer).__name__].items()}
    ((_, args, kwargs),) = flops._skeletons.values()  # one call shape
    with FlopCounterMode(display=False) as meta, torch.no_grad():
        _meta_model(type(pipe.transformer), json.dumps(dict(pipe.transformer.config), sort_keys=True, default=str))(
            *args, **kwargs
        )
    meta_ops = {str(op): n * flops.calls for op, n in meta.get_flop_counts()["Global"].items()}
    assert real_ops and all(meta_ops[op] == n for op, n in real_ops.items()), (real_ops, meta_ops)
    attention = meta_ops.pop("aten.bmm")
    assert attention > 0 and flops.total() == sum(meta_ops.values()) + attention


def test_steps_a_resume_replays_are_not_counted(model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    adapter = model_cache.get(catalog.models["tiny-wan"])
    job = make_job("tiny-wan", ratio="1:1", duration_seconds=1)
    stored = MemoryCheckpoints(every=1)
    adapter.denoise(job, StepLog(), checkpoints=stored)
    resume = MemoryCheckpoints(every=10**6, resume_at=1, stored=stored.stored)
    flops = adapter.denoise(job, StepLog(), checkpoints=resume).stats.flops
    assert resume.resumes == [(1, job.steps)]
    assert flops is not None and flops.calls == (job.steps - 1) * 2


def test_wan14b_720p_matches_the_closed_form_count() -> None:
    from diffusers import WanTransformer3DModel

    config = json.loads((ARCH / "wan2.1-t2v-14b" / "transformer.json").read_text())["config"]
    with torch.device("meta"):
        module = WanTransformer3DModel.from_config(config)
    frames, height, width, text = 21, 90, 160, 512  # 81 frames at 1280x720 through the VAE (4x, 8x)
    inputs = {
        "hidden_states": torch.empty(1, 16, frames, height, width, device="meta"),
        "timestep": torch.empty(1, dtype=torch.long, device="meta"),
        "encoder_hidden_states": torch.empty(1, text, config["text_dim"], device="meta"),
        "return_dict": False,
    }
    counted = forward_flops(module, (), inputs)
    d, ffn, layers = (
        config["num_attention_heads"] * config["attention_head_dim"],
        config["ffn_dim"],
        config["num_layers"],
    )
    s = frames * (height // 2) * (width // 2)  # 1x2x2 patches
    # Per block: self-attention projections (4 D x D) and scores + values (2 S^2 D), cross-attention query and
    # output (2 D x D) over S, key and value over the text, its scores + values, and the FFN; 2 FLOPs a MAC.
    per_block = 2 * (
        4 * s * d * d + 2 * s * s * d + 2 * s * d * d + 2 * text * d * d + 2 * s * text * d + 2 * s * d * ffn
    )
    assert counted == pytest.approx(layers * per_block, rel=0.01)
    assert 6.4e15 < counted < 6.6e15  # ~6.5 PFLOPs a forward, 13 a CFG step (docs/gpu.md: the floors)


def test_mfu_only_where_the_peak_is_known() -> None:
    assert peak_tflops("cpu") is None
    assert achieved(2e12, 2.0, "cpu") == (1.0, None)

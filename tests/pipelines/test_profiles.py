"""Runtime profiles per model: the attention-backend rule read back from diffusers (and the LTX-2 crash it
prevents, reproduced), per-worker overrides checked at load, and the production dtype layout in bfloat16."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from foundation.core.catalog import Catalog, default_catalog_path
from foundation.core.errors import CatalogError
from foundation.settings.models import ModelRuntimeSettings
from pipelines.errors import ModelLoadError
from pipelines.families.ltx2 import LTX2TextToVideo
from pipelines.families.wan import WanTextToVideo
from pipelines.runtime.adapter import generate
from pipelines.runtime.options import ATTENTION_BACKENDS, MASK_REJECTING_BACKENDS, load_model_catalog
from pipelines.runtime.registry import load_adapter
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of

SMALL = {"ratio": "1:1", "duration_seconds": 1}


def test_the_backend_tables_match_diffusers() -> None:
    """Every diffusers backend is known, and exactly those whose kernel raises on a mask are marked."""
    from diffusers.models import attention_dispatch

    registry = attention_dispatch._AttentionBackendRegistry._backends
    assert {b.value for b in attention_dispatch.AttentionBackendName} == ATTENTION_BACKENDS
    rejecting = {name.value for name, fn in registry.items() if "`attn_mask` is not supported" in inspect.getsource(fn)}
    assert rejecting == MASK_REJECTING_BACKENDS


def test_a_mask_rejecting_backend_crashes_ltx2_in_diffusers(tiny_models_dir: Path) -> None:
    """The failure the catalog rule prevents: LTX-2's cross-attention passes a mask to a flash kernel."""
    import torch
    from diffusers import LTX2Pipeline, attention_backend

    pipe = LTX2Pipeline.from_pretrained(tiny_models_dir / "tiny-ltx2", dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    # set_attention_backend makes its backend the process's active one too: the context gives the old one back,
    # so the other tests of this process keep theirs.
    with attention_backend("_native_flash"):
        pipe.transformer.set_attention_backend("_native_flash")
        with pytest.raises(ValueError, match="`attn_mask` is not supported"):
            pipe(prompt="a fox", height=64, width=64, num_frames=9, num_inference_steps=1, output_type="latent")


def _catalog_with(tmp_path: Path, model: str, **runtime: Any) -> Path:
    raw = yaml.safe_load(default_catalog_path().read_text(encoding="utf-8"))
    entry = next(m for m in raw["models"] if m["id"] == model)
    entry["runtime"] = {**entry.get("runtime", {}), **runtime}
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.parametrize("backend", ["flash", "_flash_3_hub", "sage", "_native_flash"])
def test_the_catalog_refuses_a_mask_rejecting_backend_for_ltx2(tmp_path: Path, backend: str) -> None:
    with pytest.raises(CatalogError, match=rf"'tiny-ltx2'.*{backend}.*rejects attention masks"):
        load_model_catalog(_catalog_with(tmp_path, "tiny-ltx2", attention_backend=backend))
    # Wan attends without masks: the same backend is its to use.
    assert load_model_catalog(_catalog_with(tmp_path, "tiny-wan", attention_backend=backend)).models["tiny-wan"]


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        ({"attention_backend": "flash3"}, "not a diffusers attention backend"),
        ({"dtypes": {"unet": "float32"}}, "not components of family"),
        ({"offload": "sequential"}, "offload"),
        ({"tiling": True}, "tiling"),
    ],
)
def test_the_catalog_refuses_bad_profiles(tmp_path: Path, runtime: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_model_catalog(_catalog_with(tmp_path, "tiny-wan", **runtime))


def test_a_worker_override_is_checked_at_load(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    runtime = tiny_runtime.model_copy(update={"profile_overrides": {"tiny-ltx2": {"attention_backend": "flash"}}})
    with pytest.raises(ModelLoadError, match=r"tiny-ltx2: runtime profile refused.*rejects attention masks"):
        load_adapter(catalog.models["tiny-ltx2"], runtime)
    runtime = tiny_runtime.model_copy(update={"profile_overrides": {"tiny-wan": {"vae_tilling": True}}})
    with pytest.raises(ModelLoadError, match="vae_tilling"):
        load_adapter(catalog.models["tiny-wan"], runtime)


def test_ltx2_runs_with_a_mask_accepting_backend(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    runtime = tiny_runtime.model_copy(
        update={"dtype": "bfloat16", "profile_overrides": {"tiny-ltx2": {"attention_backend": "_native_math"}}}
    )
    adapter = load_adapter(catalog.models["tiny-ltx2"], runtime)
    try:
        assert isinstance(adapter, LTX2TextToVideo)
        media = generate(adapter, make_job("tiny-ltx2", variant="fast", **SMALL), StepLog())
        assert frames_of(media).shape == (media.num_frames, media.height, media.width, 3)
    finally:
        adapter.unload()


def test_a_profile_backend_stays_its_own_pipeline(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    """A profile's backend is set on its pipeline's transformers and nowhere else: the process's active backend
    (what every model without one of its own runs on, and what context parallel checks) is left as it was.
    diffusers' set_attention_backend alone makes it ``_native_math`` for the whole process, and a tiny-wan made
    context parallel later in that process was refused (make test-stress)."""
    from diffusers.models import attention_dispatch

    def active() -> str:
        return attention_dispatch._AttentionBackendRegistry.get_active_backend()[0].value

    before = active()
    runtime = tiny_runtime.model_copy(
        update={"profile_overrides": {"tiny-ltx2": {"attention_backend": "_native_math"}}}
    )
    adapter = load_adapter(catalog.models["tiny-ltx2"], runtime)
    try:
        assert isinstance(adapter, LTX2TextToVideo)
        assert {p._attention_backend.value for p in adapter.pipe.transformer.attn_processors.values()} == {
            "_native_math"
        }
        assert active() == before != "_native_math"
    finally:
        adapter.unload()


def test_wan_in_bfloat16_keeps_its_vae_in_float32(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    """The production layout: transformer and UMT5 in bf16, the VAE in float32, run end to end on CPU."""
    import torch

    spec = catalog.models["tiny-wan"]
    assert spec.runtime.dtypes == catalog.models["wan2.2-t2v-a14b"].runtime.dtypes == {"vae": "float32"}
    adapter = load_adapter(spec, tiny_runtime.model_copy(update={"dtype": "bfloat16"}))
    try:
        assert isinstance(adapter, WanTextToVideo)
        pipe = adapter.pipe
        assert pipe.transformer.dtype == torch.bfloat16
        assert pipe.text_encoder.dtype == torch.bfloat16
        assert pipe.vae.dtype == torch.float32
        job = make_job("tiny-wan", variant="fast", **SMALL)
        latents = adapter.denoise(job, StepLog())
        frames = frames_of(adapter.decode(latents, job))
        assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3)
        assert frames.std() > 0
        again = frames_of(generate(adapter, job, StepLog()))
        np.testing.assert_array_equal(frames, again)
    finally:
        adapter.unload()


def test_ltx2_two_stage_runs_in_bfloat16(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob
) -> None:
    import torch

    adapter = load_adapter(catalog.models["tiny-ltx2-two-stage"], tiny_runtime.model_copy(update={"dtype": "bfloat16"}))
    try:
        assert isinstance(adapter, LTX2TextToVideo)
        assert adapter.pipe.transformer.dtype == torch.bfloat16
        assert adapter.upsample_pipe.latent_upsampler.dtype == torch.bfloat16
        job = make_job("tiny-ltx2-two-stage", resolution="144p", duration_seconds=1)
        media = generate(adapter, job, StepLog())
        assert frames_of(media).shape == (job.num_frames, job.gen_height, job.gen_width, 3)
        assert media.audio is not None and media.audio.samples.shape[0] == 2
    finally:
        adapter.unload()


@pytest.mark.parametrize(("dtype", "ratio"), [("float32", 4), ("bfloat16", 2)])
def test_fp8_storage_quarters_or_halves_the_cast_layers_and_still_generates(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob, dtype: str, ratio: int
) -> None:
    """Layerwise casting: every cast layer's weight is stored as float8_e4m3fn (1 byte a value against 4 in
    float32, 2 in bf16) and cast up as it runs; norms and embeddings are not cast. The job still renders."""
    import torch

    spec = catalog.models["tiny-wan"]
    plain = load_adapter(spec, tiny_runtime.model_copy(update={"dtype": dtype}))
    runtime = tiny_runtime.model_copy(update={"dtype": dtype, "profile_overrides": {"tiny-wan": {"fp8": "storage"}}})
    fp8 = load_adapter(spec, runtime)
    try:
        assert isinstance(plain, WanTextToVideo) and isinstance(fp8, WanTextToVideo)
        before = {n: p for n, p in plain.pipe.transformer.named_parameters()}
        cast = {n: p for n, p in fp8.pipe.transformer.named_parameters() if p.dtype == torch.float8_e4m3fn}
        assert cast  # the linear and conv layers (weights and biases)
        for name, param in cast.items():
            assert before[name].nbytes == ratio * param.nbytes, name
        assert not any("norm" in n for n in cast)  # kept in the compute dtype
        # The whole transformer: the uncast parameters as they were, the cast ones at 1/ratio (on the tiny model
        # embeddings and norms are a large share; on Wan 2.1 14B the cast layers hold 98.4 % of the parameters).
        total = sum(p.nbytes for p in fp8.pipe.transformer.parameters())
        kept = sum(p.nbytes for n, p in before.items() if n not in cast)
        assert total == kept + sum(before[n].nbytes for n in cast) // ratio
        job = make_job("tiny-wan", variant="fast", **SMALL)
        frames = frames_of(generate(fp8, job, StepLog()))
        assert frames.shape == (job.num_frames, job.gen_height, job.gen_width, 3) and frames.std() > 0
    finally:
        plain.unload()
        fp8.unload()


def test_fp8_compute_is_refused_at_load_off_hopper(tiny_runtime: ModelRuntimeSettings, catalog: Catalog) -> None:
    runtime = tiny_runtime.model_copy(update={"profile_overrides": {"tiny-wan": {"fp8": "compute"}}})
    with pytest.raises(ModelLoadError, match=r"fp8 compute needs a CUDA device of compute capability 8.9"):
        load_adapter(catalog.models["tiny-wan"], runtime)

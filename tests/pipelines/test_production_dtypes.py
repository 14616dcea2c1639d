"""Every family in the dtypes production runs it: one tiny model per family loaded in its real entry's layout
(bf16 transformer and text encoders, the VAE as the profile says), every mode of it run, and every parameter of
every component in the dtype it was loaded in after each job.

Float32 tiny models cannot see a cast: diffusers' ``from_pipe`` (the second pipeline of a two-mode checkpoint)
ends with ``.to(dtype=float32)`` by default, so the first job of that mode turned the loaded bf16 model float32
in place for every later job (twice the memory and float32 matmuls; LTX-2's next denoiser call then raised on a
bf16 prompt mask). The mode that builds the second pipeline runs first here.
"""

from __future__ import annotations

from typing import Any

import pytest

from foundation.core.catalog import Catalog
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.adapter import generate
from pipelines.runtime.registry import load_adapter
from tests.pipelines.conftest import MakeJob
from tests.pipelines.helpers import StepLog, frames_of
from tests.pipelines.i2v_support import fitted, i2v_job

# (tiny model, the real entry whose layout it is loaded in, its modes in the order they run)
FAMILIES = [
    ("tiny-wan-ti2v", "wan2.2-ti2v-5b", ["text_to_video", "image_to_video"]),
    ("tiny-wan-i2v", "wan2.1-i2v-14b-480p", ["image_to_video"]),
    ("tiny-ltx2", "ltx-2", ["image_to_video", "text_to_video"]),
    ("tiny-ltx2.5", "ltx-2.5", ["image_to_video", "text_to_video"]),  # and its diffusion decoder, held beside
    ("tiny-ltx2.5-dev", "ltx-2.5-dev", ["image_to_video", "text_to_video"]),  # its transformer from transformer_full/
    ("tiny-hunyuan15", "hunyuanvideo-1.5-480p", ["text_to_video"]),
    ("tiny-hunyuan15-i2v", "hunyuanvideo-1.5-i2v-480p", ["image_to_video"]),
]


def parameter_dtypes(adapter: Any) -> dict[str, dict[str, Any]]:
    """Per component of the adapter's pipeline that is a torch module, and per module it holds beside it (an
    upsampler, a diffusion decoder), the dtype of each parameter and buffer by name."""
    import torch

    modules = {**adapter.pipe.components, **{type(m).__name__: m for m in adapter.held_modules()}}
    return {
        name: {key: t.dtype for key, t in [*module.named_parameters(), *module.named_buffers()]}
        for name, module in modules.items()
        if isinstance(module, torch.nn.Module)
    }


@pytest.mark.parametrize(("tiny", "real", "modes"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_every_mode_leaves_every_component_in_its_dtype(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob, tiny: str, real: str, modes: list[str]
) -> None:
    import torch

    spec, production = catalog.models[tiny], catalog.models[real]
    assert production.dtype == "bfloat16"
    assert spec.runtime.dtypes == production.runtime.dtypes, f"{tiny} must load in {real}'s component dtypes"
    assert sorted(spec.modes) == sorted(modes), "every mode of the tiny model runs"
    adapter = load_adapter(spec, tiny_runtime.model_copy(update={"dtype": production.dtype}))
    try:
        loaded = parameter_dtypes(adapter)
        for name in ("transformer", "text_encoder", "vae"):  # the layout itself: dtypes is a {component: dtype} map
            expected = getattr(torch, production.runtime.dtypes.get(name, production.dtype))
            assert adapter.pipe.components[name].dtype == expected, name
        for module in adapter.held_modules():  # the latent upsampler and LTX-2.5's diffusion decoder
            assert module.dtype == getattr(torch, production.dtype), type(module).__name__
        for mode in modes:
            variant = "fast" if "fast" in spec.modes[mode].variants else "standard"
            if mode == "image_to_video":
                job = i2v_job(catalog, tiny, variant=variant)
                media = generate(adapter, job, StepLog(), image=fitted(job, seed=3))
            else:
                job = make_job(tiny, variant=variant, resolution="144p", ratio="16:9", duration_seconds=1)
                media = generate(adapter, job, StepLog())
            assert frames_of(media).shape == (job.num_frames, job.gen_height, job.gen_width, 3)
            after = parameter_dtypes(adapter)
            changed = {
                f"{component}.{key}: {dtype} -> {after[component][key]}"
                for component, dtypes in loaded.items()
                for key, dtype in dtypes.items()
                if after[component][key] != dtype
            }
            assert not changed, f"{tiny} {mode} changed dtypes: {sorted(changed)[:5]} ({len(changed)} in all)"
    finally:
        adapter.unload()

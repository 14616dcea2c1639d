"""A LoRA some of whose keys diffusers' conversion drops (LightX2V's ``.diff`` weight deltas, which its Wan converter
drops at info level) is refused at load, unless the catalog entry names those keys; on tiny Wan's real pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from foundation.core.catalog import Catalog, LoraSpec, ModelSpec, VariantSpec
from foundation.settings.models import ModelRuntimeSettings
from pipelines.runtime.lora import load_variant_loras, lora_adapter_name

FOLDER = "lightx2v-style-loras"  # beside the tiny models, where a tiny entry's lora.weights resolves
LORA = "with-diff.safetensors"


@pytest.fixture
def pipe(tiny_models_dir: Path) -> Any:
    """A fresh tiny Wan pipeline: one LoRA per pipeline (peft warns on a second, and warnings are errors here)."""
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(tiny_models_dir / "tiny-wan")
    _write_lightx2v_lora(pipe, tiny_models_dir / FOLDER)
    return pipe


def _write_lightx2v_lora(pipe: Any, folder: Path) -> None:
    """Block 0's self-attention q in LightX2V's layout (``diffusion_model.`` keys, lora_down/up, an alpha), and
    the full-weight delta of its k (``.diff``) that LightX2V adds and diffusers' converter leaves out."""
    import torch
    from safetensors.torch import save_file

    q = pipe.transformer.blocks[0].attn1.to_q
    k = pipe.transformer.blocks[0].attn1.to_k
    rank = 2
    tensors = {
        "diffusion_model.blocks.0.self_attn.q.lora_down.weight": torch.randn(rank, q.in_features),
        "diffusion_model.blocks.0.self_attn.q.lora_up.weight": torch.randn(q.out_features, rank),
        "diffusion_model.blocks.0.self_attn.q.alpha": torch.tensor(float(rank)),
        "diffusion_model.blocks.0.self_attn.k.diff": torch.randn(k.out_features, k.in_features),
    }
    folder.mkdir(exist_ok=True)
    save_file(tensors, str(folder / LORA))


def _only_variant(base: ModelSpec, lora: LoraSpec) -> ModelSpec:
    t2v = base.modes["text_to_video"]
    variant = VariantSpec(steps=2, guidance_scale=1.0, flow_shift=3.0, lora=lora)
    return base.model_copy(update={"modes": {"text_to_video": t2v.model_copy(update={"variants": {"v": variant}})}})


def _loaded(pipe: Any) -> set[str]:
    return {name for names in pipe.get_list_adapters().values() for name in names}


def test_a_dropped_key_refuses_the_lora(pipe: Any, catalog: Catalog, tiny_runtime: ModelRuntimeSettings) -> None:
    spec = _only_variant(catalog.models["tiny-wan"], LoraSpec(weights=FOLDER, weight_name=LORA))
    load_variant_loras(pipe, spec, tiny_runtime)
    assert lora_adapter_name("text_to_video", "v") not in _loaded(pipe)  # the model serves, not the variant


def test_a_drop_the_entry_names_is_accepted(pipe: Any, catalog: Catalog, tiny_runtime: ModelRuntimeSettings) -> None:
    named = LoraSpec(weights=FOLDER, weight_name=LORA, dropped_keys=("*.self_attn.k.diff",))
    load_variant_loras(pipe, _only_variant(catalog.models["tiny-wan"], named), tiny_runtime)
    assert lora_adapter_name("text_to_video", "v") in _loaded(pipe)

"""The memory plan: real architecture configs counted on the meta device, the estimates, the verdicts per
device, `genworker plan`, and the worker leaving out models its device cannot fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foundation.core.catalog import Catalog, ModelSpec, RuntimeProfile, load_catalog
from foundation.core.errors import CatalogError, FatalWorkerError
from foundation.settings import load_settings
from foundation.settings.models import ModelRuntimeSettings
from genworker.cli import app
from pipelines.planning.memory_plan import (
    DECODE_WORKING,
    DECODER,
    GPU_CLASSES,
    OFFLOAD_MODES,
    VIDEO_COPIES,
    Component,
    JobShape,
    _measure,
    arch_dir,
    decode_gb,
    load_components,
    plan_model,
    reserve_gb,
)
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.options import FAMILY_COMPONENTS
from pipelines.runtime.profile import runtime_profile
from pipelines.runtime.registry import hub_revision
from worker.memory import fitting_models, planned_peak

GIB = 2**30
REAL = (
    "wan2.1-t2v-1.3b",
    "wan2.1-t2v-14b",
    "wan2.2-t2v-a14b",
    "wan2.2-i2v-a14b",
    "wan2.2-ti2v-5b",
    "skyreels-v2-t2v-14b-720p",
    "ltx-2",
    "hunyuanvideo-1.5-480p",
    "hunyuanvideo-1.5-720p",
)


def test_every_arch_config_names_a_component_of_its_family(catalog: Catalog) -> None:
    for folder in arch_dir().iterdir():
        if not folder.is_dir():
            continue
        spec = catalog.get(folder.name)
        assert spec is not None, f"configs/arch/{folder.name} is no catalog model"
        for path in folder.glob("*.json"):
            # The generic family names its components in the catalog entry's ``diffusers`` block.
            named = set(spec.diffusers.components) if spec.diffusers is not None else set()
            assert path.stem in FAMILY_COMPONENTS[spec.family] | named | {"prompt_llm"}, path
            entry = json.loads(path.read_text(encoding="utf-8"))
            assert entry["source"] and entry["library"] in {"diffusers", "transformers"}, path


def test_parameter_counts_match_the_published_sizes(catalog: Catalog) -> None:
    """Meta-device counts of the shipped configs against the published sizes (research/gpu-recipes.md)."""
    published = {  # (model, component): billions of parameters
        ("wan2.1-t2v-1.3b", "transformer"): 1.42,
        ("wan2.1-t2v-14b", "transformer"): 14.29,
        ("wan2.2-t2v-a14b", "transformer_2"): 14.29,
        ("wan2.1-t2v-14b", "text_encoder"): 5.68,  # UMT5-XXL encoder, 11.4 GB in bf16
        ("wan2.1-t2v-14b", "vae"): 0.127,
        ("wan2.1-t2v-14b", "prompt_llm"): 7.62,  # Qwen2.5-7B-Instruct
        ("ltx-2", "transformer"): 18.88,
        ("ltx-2", "vae"): 1.22,
        ("ltx-2", "text_encoder"): 12.19,  # Gemma-3-12B with its vision tower
        ("wan2.2-i2v-a14b", "transformer"): 14.29,  # "A14B": 14B active per step, the 14B shape per expert
        ("wan2.2-ti2v-5b", "transformer"): 5.0,  # "5B"
        ("skyreels-v2-t2v-14b-720p", "transformer"): 14.29,  # the Wan 2.1 14B T2V shape
    }
    for (model, name), billions in published.items():
        spec = catalog.models[model]
        comps = {c.name: c for c in load_components(spec, spec.runtime) or []}
        assert comps[name].params / 1e9 == pytest.approx(billions, rel=0.01), (model, name)


def test_component_bytes_follow_the_profile_dtypes(catalog: Catalog) -> None:
    """The production layout: bf16 weights, the Wan VAE in float32, the classes' float32-kept modules."""
    spec = catalog.models["wan2.1-t2v-14b"]
    comps = {c.name: c for c in load_components(spec, spec.runtime) or []}
    assert comps["vae"].weight_bytes >= 4 * comps["vae"].params  # float32 per the profile
    assert 2 * comps["text_encoder"].params <= comps["text_encoder"].weight_bytes < 2.01 * comps["text_encoder"].params
    # WanTransformer3DModel keeps its norms, time embedder and modulation tables in float32.
    assert 2 * comps["transformer"].params < comps["transformer"].weight_bytes < 2.01 * comps["transformer"].params
    ltx = catalog.models["ltx-2"]
    transformer = next(c for c in load_components(ltx, ltx.runtime) or [] if c.name == "transformer")
    assert transformer.lora_params > 0  # the two-stage recipe's distilled LoRA is counted with it


@pytest.mark.parametrize("fp8", ["storage", "compute"])
def test_fp8_counts_the_denoiser_weights_at_one_byte_where_the_runtime_casts_them(catalog: Catalog, fp8: str) -> None:
    """``runtime.fp8`` in the plan: the denoisers' cast weights at 1 byte, everything else as before, and the
    smaller resident set changes the verdict (Wan 2.1 14B on 48 GB: model offload in bf16, none with FP8)."""
    spec = catalog.models["wan2.1-t2v-14b"]
    bf16 = {c.name: c for c in load_components(spec, spec.runtime) or []}
    cast = spec.runtime.model_copy(update={"fp8": fp8})
    small = {c.name: c for c in load_components(spec, cast) or []}
    # Linear weights are 98 % of the transformer's parameters; the layerwise casting hook skips Wan's patch
    # and condition embedders and norms, torchao quantizes every Linear (the condition embedder's too).
    assert small["transformer"].params == bf16["transformer"].params  # at least a byte each
    assert small["transformer"].params <= small["transformer"].weight_bytes < 0.52 * bf16["transformer"].weight_bytes
    assert small["text_encoder"] == bf16["text_encoder"] and small["vae"] == bf16["vae"]  # denoisers only
    assert [r.verdict for r in plan_model(spec, spec.runtime, 48).rows] == ["needs offload (model)"] * 2
    assert [r.verdict for r in plan_model(spec, cast, 48).rows] == ["fits"] * 2


def test_the_fp8_storage_count_equals_the_bytes_of_a_cast_tiny_model(tiny_runtime: ModelRuntimeSettings) -> None:
    """The meta count against the real thing: tiny Wan's transformer loaded in bf16 and layerwise cast as the
    worker does (``pipelines.runtime.profile.apply_fp8``) holds exactly the bytes the plan counts."""
    import torch
    from diffusers import WanTransformer3DModel

    from pipelines.runtime.memory import module_bytes
    from pipelines.runtime.profile import apply_fp8

    folder = Path(tiny_runtime.tiny_models_dir) / "tiny-wan" / "transformer"
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    entry = {"library": "diffusers", "class": "WanTransformer3DModel", "config": config}
    counted = _measure("transformer", json.dumps(entry), "bfloat16", fp8="storage")
    real = WanTransformer3DModel.from_pretrained(folder, torch_dtype=torch.bfloat16)
    plain = module_bytes(real)
    apply_fp8([real], "storage", "cpu")
    assert any(p.dtype == torch.float8_e4m3fn for p in real.parameters())
    assert counted.weight_bytes == module_bytes(real) < plain


def test_the_ltx2_decode_estimate_reproduces_the_research_figures(catalog: Catalog) -> None:
    """Untiled 1080p: 7.6 GiB (5 s) and 15.1 GiB (10 s) for one decoder module's input and output."""
    spec = catalog.models["ltx-2"]
    untiled = spec.runtime.model_copy(update={"vae_tiling": False})
    comps = {c.name: c for c in load_components(spec, untiled) or []}
    video_gib = {s: 3 * f * 1088 * 1920 * 2 / GIB for s, f in ((5, 121), (10, 241))}
    five = decode_gb(spec, untiled, comps, JobShape(1920, 1088, 121, 5)) * 1e9 / GIB - video_gib[5]
    ten = decode_gb(spec, untiled, comps, JobShape(1920, 1088, 241, 10)) * 1e9 / GIB - video_gib[10]
    assert five == pytest.approx(7.6, abs=0.1)
    assert ten == pytest.approx(15.1, abs=0.1)
    copies = VIDEO_COPIES[("ltx2", True)]  # the tiled decoder's tiles, blend and concatenation (simulated)
    tiled = decode_gb(spec, spec.runtime, comps, JobShape(1920, 1088, 241, 10)) * 1e9 / GIB - copies * video_gib[10]
    assert tiled < 1.0  # one 16-frame 512x512 tile


def test_verdicts_follow_the_device_and_the_profile(catalog: Catalog) -> None:
    ltx = catalog.models["ltx-2"]
    on_80 = plan_model(ltx, ltx.runtime, 80)
    assert [r.verdict for r in on_80.rows] == ["fits", "fits", "fits"]
    for row in on_80.rows:
        assert row.peak_gb["none"] > row.peak_gb["model"] > row.peak_gb["group"]
    on_48 = plan_model(ltx, ltx.runtime, 48)
    assert {r.verdict for r in on_48.rows} == {"needs offload (group)"}
    assert not on_48.fits("1080p", 1)
    resident = ltx.runtime.model_copy(update={"offload": "none"})
    assert {r.verdict for r in plan_model(ltx, resident, 80).rows} == {"needs offload (model)"}
    assert {r.verdict for r in plan_model(ltx, resident, 141).rows} == {"fits"}
    assert {r.verdict for r in plan_model(ltx, ltx.runtime, 8).rows} == {"does not fit"}
    # Longer clips need more: the longest duration that fits shrinks with the device.
    wan = catalog.models["wan2.1-t2v-14b"]
    rows_24 = {r.resolution: r for r in plan_model(wan, wan.runtime.model_copy(update={"offload": "model"}), 38).rows}
    assert rows_24["480p"].max_seconds == 5 and 0 < rows_24["720p"].max_seconds < 5


def test_a_model_without_arch_config_is_skipped_not_crashed(catalog: Catalog, tmp_path: Path) -> None:
    spec = catalog.models["wan2.1-t2v-14b"]
    plan = plan_model(spec, spec.runtime, 80, root=tmp_path)
    assert plan.skipped.startswith("no arch config") and plan.fits("720p", 5)
    assert plan_model(catalog.models["tiny-wan"], catalog.models["tiny-wan"].runtime, 1).fits("144p", 5)
    # A config this diffusers cannot build: reported unplanned, never a crash.
    (tmp_path / spec.id).mkdir()
    entry = {"library": "diffusers", "class": "NoSuchTransformer3DModel", "source": "-", "config": {}}
    (tmp_path / spec.id / "transformer.json").write_text(json.dumps(entry), encoding="utf-8")
    broken = plan_model(spec, spec.runtime, 80, root=tmp_path)
    assert broken.skipped.startswith("no plan: its arch config cannot be used here (AttributeError")
    assert broken.fits("720p", 5)


def test_genworker_plan_prints_the_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["plan", "--gpu-memory-gb", "48", "--model", "ltx-2", "--model", "wan2.1-t2v-1.3b", "--model", "tiny-wan"]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "### 48 GB device" in out
    assert "| 1080p 1472x1472, 10 s | 241 |" in out and "needs offload (group)" in out
    assert "| 480p 736x544, 5 s | 81 |" in out and "| fits | 5 s |" in out
    assert "`tiny-wan`: tiny CPU model: not planned" in out
    assert "Unpinned hub revisions" not in out  # LTX-2's one repo, the 1.3B's and its chat LLM are all pinned
    lora = CliRunner().invoke(app, ["plan", "--gpu-memory-gb", "80", "--model", "wan2.1-t2v-14b"])
    unpinned = lora.output.split("Unpinned hub revisions")[1]  # the 14B's step LoRA repo is not pinned
    assert "wan2.1-t2v-14b (lightx2v/Wan2.1-Distill-Loras)" in unpinned and "Qwen" not in unpinned
    bad = CliRunner().invoke(app, ["plan", "--gpu-memory-gb", "48", "--model", "nope"])
    assert bad.exit_code == 2 and "unknown model ids ['nope']" in bad.output


def test_the_worker_leaves_out_models_its_device_cannot_fit(catalog: Catalog, tmp_path: Path) -> None:
    settings = load_settings(None)
    hosted = ["ltx-2", "wan2.1-t2v-1.3b", "tiny-wan"]
    # The 1.3B decodes untiled in float32: 8.2 GB at 736x544 x 81 frames (genworker simulate), over a 24 GB card.
    assert fitting_models(settings, catalog, hosted, 24) == ["tiny-wan"]
    assert fitting_models(settings, catalog, hosted, 30) == ["wan2.1-t2v-1.3b", "tiny-wan"]
    assert fitting_models(settings, catalog, hosted, 80) == hosted
    # An override that fits: group offload brings LTX-2 onto a 48 GB card (not a 24 GB one: its image-to-video
    # denoise at 1472x1472 x 241 frames holds 26.7 GB of activations, genworker simulate).
    grouped = load_settings(None, models={"profile_overrides": {"ltx-2": {"offload": "group"}}})
    assert fitting_models(grouped, catalog, ["ltx-2"], 48) == ["ltx-2"]
    with pytest.raises(FatalWorkerError, match="no hosted model fits"):
        fitting_models(settings, catalog, ["ltx-2"], 24)


def test_revisions_are_commit_shas_passed_only_to_hub_loads(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert hub_revision("Lightricks/LTX-2", "Lightricks/LTX-2", sha) == {"revision": sha}
    assert hub_revision("Lightricks/LTX-2", "/weights/Lightricks/LTX-2", sha) == {}
    assert hub_revision("Lightricks/LTX-2", "Lightricks/LTX-2", None) == {}
    text = Path("configs/models.yaml").read_text(encoding="utf-8")
    path = tmp_path / "models.yaml"
    pinned = load_catalog().models["ltx-2"].revision
    assert pinned is not None and f"revision: {pinned}\n" in text
    path.write_text(text.replace(f"revision: {pinned}\n", "revision: main\n"))
    with pytest.raises(CatalogError, match="'revision'"):
        load_catalog(path)
    path.write_text(text.replace(f"revision: {pinned}\n", f"revision: {sha}\n"))
    assert load_catalog(path).models["ltx-2"].revision == sha


@pytest.mark.parametrize("model", REAL)
def test_every_shipped_real_model_has_a_plan(catalog: Catalog, model: str) -> None:
    spec = catalog.models[model]
    plan = plan_model(spec, spec.runtime, 80)
    assert not plan.skipped and [r.resolution for r in plan.rows] == spec.resolutions
    assert all(set(r.peak_gb) == set(OFFLOAD_MODES) for r in plan.rows)


@pytest.mark.parametrize("model", REAL)
def test_the_catalogs_gpu_memory_covers_the_plan(catalog: Catalog, model: str) -> None:
    """``gpu_memory_gb`` (what the model cache budgets on CUDA) is at least the plan's peak under the shipped
    profile at the largest job, and while the chat LLM extends a prompt: it cannot drift below the plan."""
    spec = catalog.models[model]
    plan = plan_model(spec, spec.runtime, 1000)
    needed = max([*(r.peak_gb[spec.runtime.offload] for r in plan.rows), plan.extend_gb])
    assert spec.gpu_memory_gb >= needed, (model, spec.gpu_memory_gb, round(needed, 1))


def test_the_decode_rule_follows_the_vae_class_for_the_generic_family(catalog: Catalog) -> None:
    """SkyReels-V2 (family ``diffusers``) loads the Wan VAE: Wan's 4-frame causal decode, whatever the tiling;
    HunyuanVideo 1.5's VAE decodes every frame at once and tiles only in space (256x256)."""

    def module_gb(spec: ModelSpec, profile: RuntimeProfile, comps: dict[str, Component], frames: int) -> float:
        """The decoder module alone: the estimate less the copies of the decoded 1280x720 video it holds."""
        size = 4 if profile.dtypes.get("vae") == "float32" else 2
        rule = DECODER[comps["vae"].cls]
        copies = VIDEO_COPIES[(rule, profile.vae_tiling)]
        video = copies * frames * 3 * 720 * 1280 * size / 1e9
        return decode_gb(spec, profile, comps, JobShape(1280, 720, frames, 5)) - video

    sky = catalog.models["skyreels-v2-t2v-14b-720p"]
    comps = {c.name: c for c in load_components(sky, sky.runtime) or []}
    untiled = sky.runtime.model_copy(update={"vae_tiling": False})
    long = module_gb(sky, untiled, comps, 121)
    assert module_gb(sky, untiled, comps, 21) == pytest.approx(long) and long > 0  # 4 frames per call
    assert 0 < module_gb(sky, sky.runtime, comps, 121) < long / 10  # one 256x256 tile instead of 1280x720
    hy = catalog.models["hunyuanvideo-1.5-720p"]
    entry = {"library": "diffusers", "class": "AutoencoderKLHunyuanVideo15", "source": "-", "config": {}}
    vae = _measure("vae", json.dumps(entry), "bfloat16")  # diffusers 0.42.1 class defaults
    assert vae.dims["c_last"] == 128 and vae.dims["spatial"] == 16
    one = {"vae": vae}
    full = module_gb(hy, hy.runtime, one, 121)
    assert full == pytest.approx(module_gb(hy, hy.runtime, one, 21) * 121 / 21)  # every frame in one call
    # One 256x256 spatial tile, all frames, at the simulated working set; and every decoded tile (4 x 7) kept.
    tiles = 4 * 7 * 121 * 3 * 256 * 256 * 2 / 1e9
    assert full == pytest.approx(DECODE_WORKING["hunyuan15"] * 121 * 256 * 256 * 128 * 2 / 1e9 + tiles)


def test_hunyuanvideo_15_transformer_matches_its_published_size() -> None:
    """The transformer diffusers' convert_hunyuan_video1_5_to_diffusers.py builds (class defaults plus
    target_size/task_type): 8.3 B; and the shipped text encoders: Qwen2.5-VL-7B's language model is its 7.61 B
    less the 152064 x 3584 output head the text model does not have, byT5-small's encoder ~0.22 B."""
    entry = {
        "library": "diffusers",
        "class": "HunyuanVideo15Transformer3DModel",
        "source": "-",
        "config": {"target_size": 960, "task_type": "t2v"},
    }
    transformer = _measure("transformer", json.dumps(entry), "bfloat16")
    assert transformer.params / 1e9 == pytest.approx(8.3, rel=0.01)
    folder = Path(__file__).resolve().parents[2] / "configs" / "arch" / "hunyuanvideo-1.5-720p"
    text = _measure("text_encoder", (folder / "text_encoder.json").read_text(), "bfloat16")
    assert text.params == pytest.approx(7.61e9 - 152064 * 3584, rel=0.01)
    byt5 = _measure("text_encoder_2", (folder / "text_encoder_2.json").read_text(), "bfloat16")
    assert byt5.params / 1e9 == pytest.approx(0.22, rel=0.05)


def test_gpu_classes_plan_with_the_memory_the_device_reports() -> None:
    h100 = GPU_CLASSES["h100-80gb"]  # an "80 GB" H100 reports 81,559 MiB, not 80 GB
    assert round(h100, 1) == 85.5 and round(h100 - reserve_gb(h100), 1) == 79.7
    out = CliRunner().invoke(app, ["plan", "--gpu", "h100-80gb", "--model", "wan2.1-t2v-1.3b"])
    assert out.exit_code == 0, out.output
    assert "### h100-80gb (85.5 GB as it reports it; usable 79.7 GB after a 5.8 GB reserve)" in out.output
    both = CliRunner().invoke(app, ["plan", "--gpu", "h100-80gb", "--gpu-memory-gb", "80"])
    assert both.exit_code == 2 and "one of --gpu CLASS, --gpu-memory-gb N or --summary" in both.output
    unknown = CliRunner().invoke(app, ["plan", "--gpu", "a100"])
    assert unknown.exit_code == 2 and "unknown GPU class 'a100'" in unknown.output


def test_the_cache_counts_a_model_at_its_planned_peak_under_its_active_profile(catalog: Catalog) -> None:
    """LTX-2 declares 64 GB for its shipped profile (model offload); a worker that keeps it resident (offload
    none) must count the plan's peak for that profile, which is far above it."""
    spec = catalog.models["ltx-2"]
    resident = load_settings(None, models={"device": "cuda", "profile_overrides": {"ltx-2": {"offload": "none"}}})
    plan = plan_model(spec, runtime_profile(spec, resident.models), device_gb=0.0)
    expected = int(max(row.peak_gb["none"] for row in plan.rows) * 1e9)
    cache = ModelCache(resident.models, planned_peak=planned_peak(resident))
    assert cache.expected_bytes(spec) == expected > spec.gpu_memory_gb * 2**30
    shipped = load_settings(None, models={"device": "cuda"})
    as_shipped = ModelCache(shipped.models, planned_peak=planned_peak(shipped)).expected_bytes(spec)
    assert as_shipped < expected  # the shipped profile offloads: its own, smaller peak
    # A model without a plan keeps the catalog's figure on CUDA, and off CUDA nothing is declared.
    assert cache.expected_bytes(catalog.models["tiny-wan"]) == int(catalog.models["tiny-wan"].gpu_memory_gb * 2**30)
    assert ModelCache(ModelRuntimeSettings(device="cpu"), planned_peak=planned_peak(shipped)).expected_bytes(spec) == 0


def test_the_summary_names_the_offload_to_run_each_model_with_per_gpu_class() -> None:
    out = CliRunner().invoke(app, ["plan", "--summary", "--model", "ltx-2", "--model", "wan2.1-t2v-1.3b"])
    assert out.exit_code == 0, out.output
    assert "h100-80gb (79.7 GB usable)" in out.output.splitlines()[0]
    # LTX-2 ships offload model for an 80 GB card: there it is the least that fits; a 141 GB card runs it
    # resident, a 48 GB one needs group offload; on a 24 GB card no mode fits its 1080p 10 s image-to-video job
    # (26.7 GB of denoise activations, genworker simulate), and under its own profile no duration fits any size.
    assert (
        "| `ltx-2` | bfloat16, offload model, VAE tiling "
        "| 480p ≤ 0 s, 720p ≤ 0 s, 1080p ≤ 0 s | group (override) | model | none (override) |" in out.output
    )
    # model offload on a 24 GB card: its untiled float32 decode (8.2 GB simulated) does not fit beside the weights
    assert "| `wan2.1-t2v-1.3b` | bfloat16, vae float32, offload none | model (override) | none | none | none |" in (
        out.output
    )


def test_the_plan_counts_a_distilled_lora_at_its_rank_and_none_for_a_distilled_checkpoint(catalog: Catalog) -> None:
    """ltx-2.5 runs a distilled checkpoint and loads no LoRA; ltx-2.5-dev loads LTX-2.5's rank-450 LoRA on a
    transformer of the same shape; the LoRA's parameters grow with its rank (every block Linear: rank x (in + out))."""

    def transformer(spec: ModelSpec) -> Component:
        components = load_components(spec, spec.runtime)
        assert components is not None
        return next(c for c in components if c.name == "transformer")

    distilled, dev = catalog.models["ltx-2.5"], catalog.models["ltx-2.5-dev"]
    assert dev.two_stage is not None and dev.two_stage.lora_rank == 450
    plain, with_lora = transformer(distilled), transformer(dev)
    assert plain.lora_params == 0 and plain.params == with_lora.params
    assert with_lora.lora_params > 0 and with_lora.lora_params % 450 == 0
    at_384 = dev.model_copy(update={"two_stage": dev.two_stage.model_copy(update={"lora_rank": 384})})
    assert transformer(at_384).lora_params * 450 == with_lora.lora_params * 384
    assert with_lora.weight_bytes - plain.weight_bytes == with_lora.lora_params * 2  # bf16

"""The generic diffusers adapter (pipelines/families/generic.py) on its tiny families, and a model added by a catalog
entry alone.

Each generic family runs the shared checks (tests/pipelines/family_checks.py): every offered resolution and ratio,
the shortest and the longest duration through ``genworker generate``'s path with the MP4 decoded independently, seed
determinism, cancel within one step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from foundation.core.catalog import Catalog, default_catalog_path, load_catalog
from foundation.core.errors import CatalogError, ErrorCode, JobError
from foundation.core.resolve import ResolvedJob, resolve
from foundation.settings import Settings
from foundation.settings.models import ModelRuntimeSettings
from pipelines.families.generic import DiffusersLatents, DiffusersTextToVideo
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.options import load_model_catalog
from tests.pipelines.conftest import MakeJob
from tests.pipelines.family_checks import (
    check_cancel_within_one_step,
    check_decode_repeats,
    check_offered_outputs,
    check_seed_determinism,
    latents_of,
    request,
)
from tests.pipelines.helpers import StepLog

FAMILIES = ["tiny-hunyuan15", "tiny-skyreels-v2"]  # text_to_video
IMAGE_FAMILIES = ["tiny-hunyuan15-i2v"]  # image_to_video


@pytest.fixture(scope="module")
def settings(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    runtime = ModelRuntimeSettings(device="cpu", tiny_models_dir=str(tiny_models_dir))
    return Settings(data_dir=str(tmp_path_factory.mktemp("generic-data")), models=runtime)


def _adapter(model_cache: ModelCache, catalog: Catalog, model: str) -> DiffusersTextToVideo:
    adapter = model_cache.get(catalog.models[model])
    assert isinstance(adapter, DiffusersTextToVideo)
    return adapter


@pytest.mark.parametrize("model", FAMILIES + IMAGE_FAMILIES)
def test_every_offered_shape_is_exact_through_generate(
    model: str, settings: Settings, catalog: Catalog, tmp_path: Path
) -> None:
    check_offered_outputs(settings, catalog.models[model], tmp_path)


def test_the_generate_command_makes_a_two_second_portrait_clip(tiny_models_dir: Path, tmp_path: Path) -> None:
    """What a new user tries on tiny-hunyuan15, which once offered 1 s and two ratios: the exact command, in
    process, and its MP4 decoded independently (PyAV: 9:16 at 144p, 2 s at 4 fps)."""
    from typer.testing import CliRunner

    from foundation.settings import settings_env
    from genworker.cli import app
    from tests.integration.worker_media import assert_playable_mp4

    out = tmp_path / "clip.mp4"
    args = ["generate", "--model", "tiny-hunyuan15", "--ratio", "9:16", "--duration", "2", "--prompt", "a red fox"]
    env = settings_env({"models": {"tiny_models_dir": str(tiny_models_dir)}, "data_dir": str(tmp_path / "var")})
    result = CliRunner().invoke(app, [*args, "-o", str(out)], env=env)
    assert result.exit_code == 0, result.output
    assert_playable_mp4(out.read_bytes(), width=144, height=256, frames=8, duration_s=2.0, audio_channels=None)


@pytest.mark.parametrize("model", FAMILIES)
def test_same_seed_same_frames(model: str, model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    check_seed_determinism(_adapter(model_cache, catalog, model), make_job(model, variant="fast", seed=3))


@pytest.mark.parametrize("model", FAMILIES)
def test_cancel_stops_within_one_step(model: str, model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    adapter = _adapter(model_cache, catalog, model)
    job = make_job(model, variant="fast")  # no CFG: one pass per step, the cheapest job that can show it
    check_cancel_within_one_step(adapter, job, adapter.pipe.transformer)


def test_recipe_reaches_the_pipeline(model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    """Guidance (on HunyuanVideo 1.5's guider) and the shift each change the latents; progress counts
    every step; decoding is a separate call that repeats."""
    adapter = _adapter(model_cache, catalog, "tiny-hunyuan15")
    job = make_job("tiny-hunyuan15", variant="standard", seed=5)
    steps = StepLog()
    latents = adapter.denoise(job, steps)
    assert isinstance(latents, DiffusersLatents)
    assert steps.calls == [(1, job.steps), (2, job.steps)]
    assert adapter.pipe.guider.guidance_scale == job.guidance_scale
    assert adapter.pipe.scheduler.config.shift == job.flow_shift
    base = latents.video.numpy()
    for change in ({"guidance_scale": 3.0}, {"flow_shift": 9.0}):
        assert not np.array_equal(base, latents_of(adapter, job.model_copy(update=change))), change
    check_decode_repeats(adapter, job)


def test_off_rule_frames_are_refused(model_cache: ModelCache, catalog: Catalog, make_job: MakeJob) -> None:
    adapter = _adapter(model_cache, catalog, "tiny-hunyuan15")
    job = make_job("tiny-hunyuan15").model_copy(update={"num_frames": 6})
    with pytest.raises(JobError) as raised:
        adapter.denoise(job, StepLog())
    assert raised.value.code == ErrorCode.invalid_parameter and "4k+1" in raised.value.message


# ------------------------------------------------------------------------------------------ catalog entry alone


def _entry(**changes: object) -> dict[str, object]:
    """The shipped tiny HunyuanVideo 1.5 entry as YAML data (anchors resolved), with ``changes``."""
    raw = yaml.safe_load(default_catalog_path().read_text(encoding="utf-8"))
    entry = next(e for e in raw["models"] if e["id"] == "tiny-hunyuan15")
    return {**entry, **changes}


def test_a_new_model_of_a_served_class_by_catalog_entry_alone(
    settings: Settings, tmp_path: Path, catalog: Catalog
) -> None:
    """A researcher's own checkpoint of HunyuanVideo15Pipeline with its own recipe: one YAML entry, no code."""
    entry = _entry(
        id="my-hunyuan15-finetune",
        display_name="A fine-tune with its own recipe",
        ratios=["1:1"],
        durations=[1],
        defaults={"resolution": "144p", "ratio": "1:1", "duration_seconds": 1},
        modes={"text_to_video": {"variants": {"fast": {"steps": 3, "guidance_scale": 1.0, "flow_shift": 7.0}}}},
    )
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [entry]}), encoding="utf-8")
    custom = settings.model_copy(update={"catalog_path": str(path)})
    spec = load_catalog(path).models["my-hunyuan15-finetune"]
    check_offered_outputs(custom, spec, tmp_path)
    job, _hold = resolve(request(spec.id), load_catalog(path))
    assert (job.steps, job.flow_shift, job.width, job.height) == (3, 7.0, 144, 144)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"diffusers": None}, "needs a diffusers block"),
        ({"diffusers": {"pipeline": "HunyuanVideo15Pipeline", "arguments": {"frames": "num_frames"}}}, "renames"),
        ({"diffusers": {"pipeline": "HunyuanVideo15Pipeline", "options": ["num_frames"]}}, "set from the job"),
        ({"runtime": {"dtypes": {"unet": "float32"}}}, "not components of family"),
        ({"runtime": {"attention_backend": "flash"}}, "rejects attention masks"),
        (
            {
                "modes": {
                    "text_to_video": {
                        "variants": {"x": {"steps": 2, "guidance_scale": 1, "pipeline_kwargs": {"eta": 1}}}
                    }
                }
            },
            "unknown key 'eta'",
        ),
        ({"prompt_extend": {"method": "text_encoder"}}, "no prompt extension"),
        (
            {
                "modes": {
                    "text_to_video": {"variants": {"x": {"steps": 2, "guidance_scale": 1}}},
                    "image_to_video": {"variants": {"x": {"steps": 2, "guidance_scale": 1}}},
                }
            },
            "serves one mode",
        ),
    ],
)
def test_a_bad_generic_entry_fails_at_load(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": [_entry(**changes)]}), encoding="utf-8")
    with pytest.raises(CatalogError, match=message):
        load_model_catalog(path)


def test_the_pipeline_class_and_argument_names_are_checked_when_used(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog, make_job: MakeJob, model_cache: ModelCache
) -> None:
    spec = catalog.models["tiny-hunyuan15"]
    assert spec.diffusers is not None
    missing = spec.model_copy(update={"diffusers": spec.diffusers.model_copy(update={"pipeline": "NoSuchPipeline"})})
    with pytest.raises(JobError, match="no pipeline class 'NoSuchPipeline'"):
        DiffusersTextToVideo.load(missing, tiny_runtime, device="cpu", dtype="float32")
    adapter = _adapter(model_cache, catalog, "tiny-hunyuan15")
    renamed = spec.diffusers.model_copy(update={"arguments": {"num_frames": "num_video_frames"}})
    other = DiffusersTextToVideo(
        spec.model_copy(update={"diffusers": renamed}),
        tiny_runtime,
        adapter.pipe,
        device="cpu",
        dtype="float32",
        profile=spec.runtime,
    )
    with pytest.raises(JobError, match="takes no 'num_video_frames'"):
        other.denoise(make_job("tiny-hunyuan15"), StepLog())


def test_each_generic_entry_matches_its_pipeline_class(catalog: Catalog) -> None:
    """Every name a ``diffusers`` block uses exists on its class: call keywords (renamed arguments and variant
    options), constructor components (profile dtypes and denoisers)."""
    import inspect

    from foundation.core.catalog import GENERIC_ARGUMENTS
    from pipelines.families.generic import pipeline_class

    generic = [spec for spec in catalog.models.values() if spec.diffusers is not None]
    served = {"hunyuanvideo-1.5-480p", "hunyuanvideo-1.5-720p", "skyreels-v2-t2v-14b-720p", *FAMILIES, *IMAGE_FAMILIES}
    served |= {"hunyuanvideo-1.5-i2v-480p", "hunyuanvideo-1.5-i2v-720p", "hunyuanvideo-1.5-i2v-480p-step-distilled"}
    assert {spec.id for spec in generic} >= served
    for spec in generic:
        assert spec.diffusers is not None
        cls = pipeline_class(spec.diffusers.pipeline)
        keywords = set(inspect.signature(cls.__call__).parameters)
        components = set(inspect.signature(cls.__init__).parameters)
        filled = GENERIC_ARGUMENTS if "image_to_video" in spec.modes else GENERIC_ARGUMENTS - {"image"}
        called = {spec.diffusers.call_name(name) for name in filled} - {""}
        if spec.diffusers.guidance == "guider":
            called.discard("guidance_scale")
            assert "guider" in components, spec.id
        assert called | set(spec.diffusers.options) <= keywords, (spec.id, sorted(called - keywords))
        assert set(spec.diffusers.components) | set(spec.diffusers.denoisers) <= components, spec.id


# ------------------------------------------------------------------------------------------ image_to_video


def _image_job(catalog: Catalog, **params: object) -> ResolvedJob:
    from tests.pipelines.i2v_support import i2v_job

    return i2v_job(catalog, "tiny-hunyuan15-i2v", **params)


def test_the_image_conditions_the_video_and_a_seed_repeats_it(model_cache: ModelCache, catalog: Catalog) -> None:
    """The fitted image reaches HunyuanVideo 1.5 I2V's pipeline (its latents change with the image), and one image
    and one seed give the same latents twice."""
    from tests.pipelines.i2v_support import fitted

    adapter = _adapter(model_cache, catalog, "tiny-hunyuan15-i2v")
    job = _image_job(catalog, ratio="9:16")
    first = adapter.denoise(job, StepLog(), image=fitted(job, seed=1))
    again = adapter.denoise(job, StepLog(), image=fitted(job, seed=1))
    other = adapter.denoise(job, StepLog(), image=fitted(job, seed=4))
    assert isinstance(first, DiffusersLatents) and isinstance(other, DiffusersLatents)
    assert isinstance(again, DiffusersLatents)
    assert np.array_equal(first.video.numpy(), again.video.numpy())
    assert not np.allclose(first.video.numpy(), other.video.numpy())
    assert tuple(first.video.shape[-2:]) == (job.gen_height // 16, job.gen_width // 16)


def test_a_pipeline_that_sizes_the_video_otherwise_is_refused(
    tiny_runtime: ModelRuntimeSettings, catalog: Catalog
) -> None:
    """Without the entry's video processor, diffusers re-buckets the fitted image (to 16x16 at the tiny model's
    target size): the adapter refuses the other size instead of returning another video."""
    from diffusers.pipelines.hunyuan_video1_5.image_processor import HunyuanVideo15ImageProcessor

    from pipelines.runtime.registry import load_adapter
    from tests.pipelines.i2v_support import fitted

    spec = catalog.models["tiny-hunyuan15-i2v"]
    assert spec.diffusers is not None
    plain = spec.model_copy(update={"diffusers": spec.diffusers.model_copy(update={"video_processor": None})})
    adapter = load_adapter(plain, tiny_runtime)
    try:
        assert type(adapter.pipe.video_processor) is HunyuanVideo15ImageProcessor
        job = _image_job(catalog)
        with pytest.raises(JobError) as raised:
            adapter.denoise(job, StepLog(), image=fitted(job, seed=1))
        assert raised.value.code == ErrorCode.pipeline_error
        assert "the job generates 256x144" in raised.value.message
    finally:
        adapter.unload()

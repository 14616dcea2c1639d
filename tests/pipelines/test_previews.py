"""Live previews on every tiny model: the projection of its real in-loop latents decodes to a small JPEG at
each step, the family's layout is read right (LTX-2's packed tokens), and a job can turn them off."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

from foundation.core.catalog import Catalog
from foundation.core.media import Preview
from foundation.core.resolve import ResolvedJob
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.previews import MAX_BYTES, MAX_WIDTH, PreviewCadence, Previews, project_latents, unpack_tokens
from tests.pipelines.conftest import MakeJob
from tests.pipelines.i2v_support import i2v_job, pattern
from worker.input_image import fit_image

TINY = ["tiny-wan", "tiny-ltx2", "tiny-ltx2-two-stage", "tiny-wan-ti2v", "tiny-hunyuan15", "tiny-skyreels-v2"]
TINY_I2V = ["tiny-wan-i2v", "tiny-wan-i2v-a14b"]


def _collect(model_cache: ModelCache, catalog: Catalog, job: ResolvedJob, **conditioning: object) -> list[Preview]:
    shown: list[Preview] = []
    previews = Previews(shown.append, PreviewCadence(every_steps=1, interval_s=0.0))
    adapter = model_cache.get(catalog.models[job.model])
    assert adapter.previewable
    steps: list[int] = []
    adapter.denoise(job, lambda done, total: steps.append(done), previews=previews, **conditioning)  # type: ignore[arg-type]
    assert [p.step for p in shown] == steps  # one per step, before the step is reported, in order
    assert all(p.total == steps[-1] for p in shown)
    return shown


def _check_images(previews: list[Preview], width: int, height: int) -> None:
    assert previews
    for preview in previews:
        data = preview.jpeg()
        assert len(data) <= MAX_BYTES
        image = Image.open(io.BytesIO(data))
        image.load()
        assert image.format == "JPEG" and image.mode == "RGB"
        assert MAX_WIDTH // 2 < image.width <= MAX_WIDTH
        # The latent frame keeps the generation's aspect (within a latent pixel of rounding).
        assert abs(image.width / image.height - width / height) < 0.25


@pytest.mark.parametrize("model", TINY)
def test_every_tiny_model_previews_each_step_as_a_small_jpeg(
    model: str, model_cache: ModelCache, catalog: Catalog, make_job: MakeJob
) -> None:
    job = make_job(model, resolution="144p", ratio="16:9", duration_seconds=1)
    previews = _collect(model_cache, catalog, job)
    _check_images(previews, job.gen_width, job.gen_height)
    assert previews[0].image != previews[-1].image  # the latents move between steps, and the picture with them


@pytest.mark.parametrize("model", TINY_I2V)
def test_image_to_video_tiny_models_preview_too(model: str, model_cache: ModelCache, catalog: Catalog) -> None:
    job = i2v_job(catalog, model)
    image = fit_image(pattern(1), job.gen_width, job.gen_height)
    _check_images(_collect(model_cache, catalog, job, image=image), job.gen_width, job.gen_height)


def test_fitted_tables_and_the_fallback_cover_any_channel_count() -> None:
    torch.manual_seed(0)
    for channels in (1, 2, 4, 8, 16, 32, 48, 128):
        rgb = project_latents(torch.randn(1, channels, 3, 9, 16))
        assert rgb.shape == (9, 16, 3) and rgb.dtype.name == "uint8"
        assert rgb.std() > 0  # a picture, not a flat color
    flat = project_latents(torch.zeros(1, 4, 1, 9, 16))  # the fallback on flat latents: mid gray, no division by 0
    assert (flat == 128).all()


def test_packed_tokens_are_laid_out_by_the_generation_aspect() -> None:
    grid = torch.arange(2 * 9 * 16).reshape(1, 2, 9, 16, 1).float()  # (batch, frames, height, width, channels)
    packed = grid.reshape(1, 2 * 9 * 16, 1)
    unpacked = unpack_tokens(packed, 2, 16 / 9)
    assert unpacked is not None and unpacked.shape == (1, 1, 2, 9, 16)
    assert torch.equal(unpacked[0, 0], grid[0, :, :, :, 0])
    assert unpack_tokens(packed, 5, 16 / 9) is None  # tokens that are not frames x area
    assert unpack_tokens(torch.zeros(1, 4, 2, 3, 3), 2, 1.0) is None


def test_the_cadence_holds_previews_to_every_n_steps_and_one_per_interval() -> None:
    now = [0.0]
    previews = Previews(lambda p: None, PreviewCadence(every_steps=2, interval_s=1.0), clock=lambda: now[0])
    assert not previews.due(1, 8) and previews.due(2, 8)
    previews.show(2, 8, torch.randn(1, 16, 1, 4, 4))
    now[0] = 0.5
    assert not previews.due(4, 8)  # within the interval
    now[0] = 1.0
    assert previews.due(4, 8) and not previews.due(5, 8)
    assert len(previews.seconds) == 1

"""Shared checks every family passes on its tiny model (the generic families' tests and the tests
``genworker pipeline new`` writes call these; nothing here is family-specific).

- ``check_offered_outputs``: every offered resolution and ratio, the shortest and the longest duration through
  ``genworker generate``'s path (resolve -> run_pipeline -> ffmpeg), the MP4 decoded independently with PyAV: exact
  size, frame count, duration (an image-only entry gets an image fitted as the worker fits one);
- ``check_seed_determinism``: same seed, same latents; another seed, other latents;
- ``check_decode_repeats``: decoding one denoise twice gives the same frames, of the job's shape;
- ``check_cancel_within_one_step``: an ``on_step`` that raises at step 1 stops the loop before step 2.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from foundation.core.catalog import ModelSpec
from foundation.core.contract import CreateRequest
from foundation.core.errors import JobCanceled
from foundation.core.resolve import ResolvedJob
from foundation.settings import Settings
from pipelines.runtime.adapter import Adapter
from tests.pipelines.helpers import StepLog, frames_of

if TYPE_CHECKING:
    from pipelines.runtime.cache import ModelCache

__all__ = [
    "check_cancel_within_one_step",
    "check_decode_repeats",
    "check_offered_outputs",
    "check_seed_determinism",
    "latents_of",
    "offered_shapes",
    "output_shapes",
    "request",
]


def offered_shapes(spec: ModelSpec) -> list[tuple[str, str, int]]:
    """Every resolution, ratio and duration the entry offers, each at least once: the i-th shape takes the i-th
    of each list (the shorter lists start over), so a tiny entry as wide as its real one (five ratios, five
    durations) costs five jobs rather than the 25 of the whole product."""
    count = max(len(spec.resolutions), len(spec.ratios), len(spec.durations))
    return [
        (
            spec.resolutions[i % len(spec.resolutions)],
            spec.ratios[i % len(spec.ratios)],
            spec.durations[i % len(spec.durations)],
        )
        for i in range(count)
    ]


def output_shapes(spec: ModelSpec) -> list[tuple[str, str, int]]:
    """``offered_shapes`` at the shortest duration, the last at the longest: every resolution and ratio and both ends
    of the durations through the MP4 path. The decode grows with the frames (a 5 s tiny clip decodes for seconds on
    a CPU), and the durations between resolve the same way (tests/unit/test_resolve.py checks each one's frames)."""
    shortest, longest = min(spec.durations), max(spec.durations)
    shapes = [(resolution, ratio, shortest) for resolution, ratio, _ in offered_shapes(spec)]
    if longest != shortest:
        resolution, ratio, _ = shapes[-1]
        if len(shapes) == 1:  # one size: it runs at both ends
            shapes.append((resolution, ratio, longest))
        else:
            shapes[-1] = (resolution, ratio, longest)
    return shapes


def request(
    model: str,
    *,
    variant: str = "fast",
    seed: int = 1,
    prompt: str = "a red fox",
    mode: str = "text_to_video",
    **params: object,
) -> CreateRequest:
    return CreateRequest.model_validate(
        {
            "model": model,
            "mode": mode,
            "variant": variant,
            "parameters": {"seed": seed, **params},
            "input": {"prompt": prompt},
        }
    )


def check_offered_outputs(settings: Settings, spec: ModelSpec, out_dir: Path) -> None:
    """Each offered resolution and ratio, the shortest and the longest duration (``output_shapes``) through the
    one-shot path: the MP4 has the exact size, frames and duration. The model loads once for all of them, as
    ``genworker generate --jobs`` does."""
    from pipelines.runtime.cache import ModelCache
    from worker.memory import planned_peak

    cache = ModelCache(settings.models, planned_peak=planned_peak(settings))
    try:
        for shape in output_shapes(spec):
            _check_offered_output(settings, spec, out_dir, shape, cache)
    finally:
        cache.clear()


def _check_offered_output(
    settings: Settings, spec: ModelSpec, out_dir: Path, shape: tuple[str, str, int], cache: ModelCache
) -> None:
    import av

    from tests.pipelines.i2v_support import fitted
    from worker.generate import generate_once, prepare_job

    resolution, ratio, seconds = shape
    mode = "text_to_video" if "text_to_video" in spec.modes else "image_to_video"
    variant = "fast" if "fast" in spec.modes[mode].variants else next(iter(spec.modes[mode].variants))
    asked = request(spec.id, variant=variant, mode=mode, resolution=resolution, ratio=ratio, duration_seconds=seconds)
    job = prepare_job(settings, asked)
    image = fitted(job, seed=len(ratio)) if mode == "image_to_video" else None
    out = out_dir / f"{spec.id}-{resolution}-{ratio.replace(':', 'x')}-{seconds}.mp4"
    result = generate_once(settings, job, out, cache=cache, image=image)
    with av.open(str(result.video)) as container:
        stream = container.streams.video[0]
        decoded = sum(1 for _ in container.decode(video=0))
        size = (stream.codec_context.width, stream.codec_context.height)
        assert stream.average_rate is not None and stream.duration is not None and stream.time_base is not None
        rate = Fraction(stream.average_rate)
        duration = float(stream.duration * stream.time_base)
    where = (resolution, ratio, seconds)
    assert size == (job.width, job.height), where
    assert decoded == job.keep_frames == seconds * spec.fps, where
    assert rate == spec.fps, where
    assert duration == pytest.approx(seconds, abs=1e-3), where
    video = next(a for a in result.artifacts if a["kind"] == "video")
    assert (video["width"], video["height"], video["frames"]) == (job.width, job.height, job.keep_frames)


def check_seed_determinism(adapter: Adapter, job: ResolvedJob) -> None:
    """Same seed, same denoised latents; another seed, other latents (decoding is checked to repeat elsewhere:
    ``check_decode_repeats``). Compared before the VAE, the costly part on CPU."""
    first, again = latents_of(adapter, job), latents_of(adapter, job)
    other = latents_of(adapter, job.model_copy(update={"seed": job.seed + 1}))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def check_decode_repeats(adapter: Adapter, job: ResolvedJob) -> np.ndarray:
    """``decode`` twice on one ``denoise`` (an out-of-memory retry) gives the same frames, of the job's shape."""
    latents = adapter.denoise(job, StepLog())
    first = frames_of(adapter.decode(latents, job))
    assert first.shape == (job.num_frames, job.gen_height, job.gen_width, 3)
    assert first.std() > 0  # real pixels, not a constant fill
    np.testing.assert_array_equal(first, frames_of(adapter.decode(latents, job)))
    return first


def latents_of(adapter: Adapter, job: ResolvedJob) -> np.ndarray:
    """The denoised latents of ``job`` as a host array (every generic family's latents are one tensor)."""
    latents = adapter.denoise(job, StepLog())
    video = getattr(latents, "video")  # noqa: B009  (the family's Latents subclass, not the base class)
    return np.asarray(video.float().cpu().numpy())


def check_cancel_within_one_step(adapter: Adapter, job: ResolvedJob, denoiser: object) -> None:
    """Cancel raised from step 1's report: the transformer runs one step's passes, not more (a pipeline may run
    CFG as one batched pass or two; a full run of the same job measures which)."""
    assert job.steps >= 2
    passes: list[int] = []
    handle = denoiser.register_forward_hook(lambda *_: passes.append(1))  # type: ignore[attr-defined]
    try:
        adapter.denoise(job, StepLog())
        per_step, rest = divmod(len(passes), job.steps)
        assert per_step >= 1 and rest == 0
        passes.clear()
        steps = StepLog(stop_at=1, error=JobCanceled())
        with pytest.raises(JobCanceled):
            adapter.denoise(job, steps)
    finally:
        handle.remove()
    assert steps.calls == [(1, job.steps)]
    assert len(passes) == per_step

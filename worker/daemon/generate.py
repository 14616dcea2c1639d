"""``genworker generate``: one job, in this process, without a queue or a store (for researchers).

The same path as the daemon — resolve → model cache → prompt extension → generate → encode — so a
clip made here is the clip a worker would upload for the same request and seed.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.core.catalog import load_catalog
from worker.core.contract import CreateRequest, PromptExtension, Stage
from worker.core.resolve import ResolvedJob, resolve
from worker.daemon.services import ensure_tiny_models
from worker.settings import Settings

if TYPE_CHECKING:
    from worker.core.media import StepCallback

__all__ = ["GenerateResult", "generate_once", "prepare_job"]

StageCallback = Callable[[Stage], None]


@dataclass
class GenerateResult:
    job: ResolvedJob
    video: Path
    poster: Path | None
    prompt_used: str
    extension: PromptExtension | None
    artifacts: list[dict[str, Any]]
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.job.model,
            "variant": self.job.variant,
            "seed": self.job.seed,
            "video": str(self.video),
            "poster": str(self.poster) if self.poster else None,
            "prompt_extension": self.extension.model_dump() if self.extension else None,
            "artifacts": self.artifacts,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


def _noop_stage(stage: Stage) -> None:
    return None


def _noop_step(step: int, total: int) -> None:
    return None


def prepare_job(settings: Settings, request: CreateRequest) -> ResolvedJob:
    """Resolve ``request`` against the catalog; raises ``RequestRejected`` (before anything loads)."""
    job, _hold = resolve(request, load_catalog(settings.catalog_path))
    return job


def generate_once(
    settings: Settings,
    job: ResolvedJob,
    out: Path,
    *,
    on_stage: StageCallback = _noop_stage,
    on_step: StepCallback = _noop_step,
) -> GenerateResult:
    """Run ``job`` and write ``out`` (MP4) plus ``out`` with ``.jpg`` (poster); raises what the pipeline raises."""
    from pipelines.cache import ModelCache
    from worker.media.encoder import encode_video

    catalog = load_catalog(settings.catalog_path)
    spec = catalog.models[job.model]
    ensure_tiny_models(settings, catalog, [spec.id])
    seconds: dict[str, float] = {}

    def timed(stage: Stage, started: float) -> None:
        seconds[stage.value] = time.perf_counter() - started

    on_stage(Stage.loading)
    started = time.perf_counter()
    adapter = ModelCache(settings.models).get(spec)
    timed(Stage.loading, started)
    prompt_used, extension = job.prompt, None
    if job.prompt_extend:
        from pipelines.prompt_extend import extend_or_fallback

        on_stage(Stage.extending_prompt)
        started = time.perf_counter()
        prompt_used, extension = extend_or_fallback(adapter, job)
        timed(Stage.extending_prompt, started)
    on_stage(Stage.denoising)
    started = time.perf_counter()
    media = adapter.generate(job.model_copy(update={"prompt": prompt_used}), on_step)
    timed(Stage.denoising, started)
    on_stage(Stage.encoding)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="genworker-generate-") as tmp:
        encoded = encode_video(
            media,
            keep_frames=job.keep_frames,
            width=job.width,
            height=job.height,
            out_dir=Path(tmp),
            settings=settings.encoder,
        )
        video, poster, artifacts = _place(encoded.artifacts(), out)
    timed(Stage.encoding, started)
    on_stage(Stage.done)
    return GenerateResult(job, video, poster, prompt_used, extension, artifacts, seconds)


def _place(files: list[tuple[Any, Path]], out: Path) -> tuple[Path, Path | None, list[dict[str, Any]]]:
    """Move the encoded files next to each other at ``out`` (video) and ``out.jpg`` (poster)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    video: Path = out
    poster: Path | None = None
    described: list[dict[str, Any]] = []
    for artifact, path in files:
        target = out if artifact.kind == "video" else out.with_suffix(".jpg")
        shutil.move(str(path), target)
        if artifact.kind == "poster":
            poster = target
        described.append(artifact.model_dump(exclude={"key"}) | {"path": str(target)})
    return video, poster, described

"""``genworker generate``: one job, in this process, without a queue or a store (for researchers).

The same path as the daemon: resolve, then the daemon's own ``run_pipeline`` (load → extend the prompt →
denoise → decode, with its out-of-memory retry and the model's time limit), then encode. So a clip made
here is the clip a worker would upload for the same request and seed.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from foundation.core.contract import CreateRequest, PromptExtension, Stage
from foundation.core.errors import ErrorCode, JobError
from foundation.core.resolve import ResolvedJob, resolve
from foundation.settings import Settings
from pipelines.runtime.options import load_model_catalog
from pipelines.runtime.previews import PreviewCadence, Previews
from worker.context import ensure_tiny_models
from worker.pipeline_run import RunHooks, run_pipeline

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.core.media import Preview, StepCallback
    from pipelines.runtime.cache import ModelCache

__all__ = ["GenerateOptions", "GenerateResult", "generate_once", "prepare_job"]

StageCallback = Callable[[Stage], None]


class GenerateOptions(BaseModel):
    """One job of ``genworker generate``, by the command's option names: its flags, or one line of ``--jobs``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    prompt: str
    image: Path | None = None
    mode: str | None = None
    variant: str = "standard"
    resolution: str | None = None
    ratio: str | None = None
    duration: int | None = None
    audio: bool | None = None
    prompt_extend: bool | None = None
    seed: int | None = None
    negative_prompt: str | None = None

    def request_body(self) -> dict[str, Any]:
        """The create request the API would receive for this job (the image goes in separately)."""
        params = {"resolution": self.resolution, "ratio": self.ratio, "duration_seconds": self.duration}
        params |= {"audio": self.audio, "prompt_extend": self.prompt_extend, "seed": self.seed}
        params |= {"negative_prompt": self.negative_prompt}
        return {
            "model": self.model,
            "mode": self.mode or ("image_to_video" if self.image is not None else "text_to_video"),
            "variant": self.variant,
            "parameters": {k: v for k, v in params.items() if v is not None},
            "input": {"prompt": self.prompt},
        }


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


class _LocalHooks(RunHooks):
    """The one-shot side of a run: stages and steps to the caller's callbacks, timed, under the model's
    time limit (``max_job_seconds``, as on a worker)."""

    def __init__(
        self,
        on_stage: StageCallback,
        on_step: StepCallback,
        *,
        limit_s: float,
        preview: Path | None = None,
        cadence: PreviewCadence | None = None,
    ) -> None:
        self._on_stage = on_stage
        self._on_step = on_step
        self._preview = preview
        self._cadence = cadence or PreviewCadence()
        self._deadline = time.monotonic() + limit_s
        self._limit_s = limit_s
        self.log = logging.getLogger("genworker.generate")
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: Stage) -> Iterator[None]:
        self._check_time()
        self._on_stage(name)
        started = time.perf_counter()
        yield
        self.seconds[name.value] = time.perf_counter() - started

    def on_step(self, done: int, total: int) -> None:
        self._check_time()
        self._on_step(done, total)

    def previews(self) -> Previews | None:
        return Previews(self._write_preview, self._cadence) if self._preview is not None else None

    def _write_preview(self, preview: Preview) -> None:
        """Replace the preview file whole (a viewer never reads half a JPEG): it always holds the latest."""
        assert self._preview is not None
        self._preview.parent.mkdir(parents=True, exist_ok=True)
        partial = self._preview.with_name(self._preview.name + ".partial")
        partial.write_bytes(preview.jpeg())
        os.replace(partial, self._preview)

    def _check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise JobError(ErrorCode.timeout, f"the job ran past its time limit ({self._limit_s:g} s)")


def prepare_job(settings: Settings, request: CreateRequest) -> ResolvedJob:
    """Resolve ``request`` against the catalog; raises ``RequestRejected`` (before anything loads)."""
    job, _hold = resolve(request, load_model_catalog(settings.catalog_path))
    return job


def generate_once(
    settings: Settings,
    job: ResolvedJob,
    out: Path,
    *,
    on_stage: StageCallback = _noop_stage,
    on_step: StepCallback = _noop_step,
    image: Image | None = None,
    cache: ModelCache | None = None,
    preview: Path | None = None,
) -> GenerateResult:
    """Run ``job`` and write ``out`` (MP4) plus ``out`` with ``.jpg`` (poster); raises what the pipeline raises.

    ``image``: the input image of an ``image_to_video`` job, fitted to the generation size
    (``worker.input_image.fit_image(decode_image(data), job.gen_width, job.gen_height)``).
    ``cache``: the models already loaded by earlier jobs of this process (``genworker generate --jobs``);
    by default a fresh one, so the model loads for this job.
    ``preview``: where the live previews go while it denoises (a JPEG, replaced by each newer one, at the
    worker settings' cadence), so the file ends holding the last one.
    """
    from foundation.media.encoder import encode_video
    from pipelines.runtime.cache import ModelCache
    from worker.memory import planned_peak

    catalog = load_model_catalog(settings.catalog_path)
    spec = catalog.models[job.model]
    ensure_tiny_models(settings, catalog, [spec.id])
    ws = settings.worker
    cadence = PreviewCadence(ws.preview_every_steps, ws.preview_interval_s)
    hooks = _LocalHooks(on_stage, on_step, limit_s=spec.max_job_seconds, preview=preview, cadence=cadence)
    cache = cache if cache is not None else ModelCache(settings.models, planned_peak=planned_peak(settings))
    rendered = run_pipeline(cache, spec, job, hooks, image=image)
    with hooks.stage(Stage.encoding), tempfile.TemporaryDirectory(prefix="genworker-generate-") as tmp:
        encoded = encode_video(
            rendered.media,
            keep_frames=job.keep_frames,
            width=job.width,
            height=job.height,
            out_dir=Path(tmp),
            settings=settings.encoder,
        )
        video, poster, artifacts = _place(encoded.artifacts(), out)
    on_stage(Stage.done)
    prompt_used = rendered.job.prompt
    return GenerateResult(job, video, poster, prompt_used, rendered.extension, artifacts, hooks.seconds)


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

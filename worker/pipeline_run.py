"""One job through a model, shared by the daemon and ``genworker generate``: load → extend the prompt →
denoise → decode, each a stage, each retried once after running out of memory. A denoise that resumed
from a checkpoint which turned out not to fit its loop runs once more from step 0 (``_Run.denoise``).

What differs between the two callers is behind ``RunHooks``: how a stage is entered and measured (the
daemon writes it to the record, checks cancel, lease and time limit, logs and observes a metric; the
one-shot command updates a progress bar and checks its own time limit), where step progress goes, and
where model loads and out-of-memory retries are counted. What each does with the media afterwards
(encode and upload, or encode to a local file) stays with the caller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from foundation.core.contract import PromptExtension, PromptTokens, Stage
from foundation.core.errors import is_out_of_memory
from pipelines.errors import CheckpointMismatch
from pipelines.runtime.flops import DenoiseFlops

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.core.catalog import ModelSpec
    from foundation.core.media import Media
    from foundation.core.resolve import ResolvedJob
    from pipelines.runtime.adapter import Adapter, Latents
    from pipelines.runtime.cache import ModelCache
    from pipelines.runtime.previews import Previews
    from pipelines.runtime.resume import Checkpoints
    from worker.logs import JobLogger

__all__ = ["Rendered", "RunHooks", "run_pipeline"]

_T = TypeVar("_T")


class RunHooks:
    """What a run reports to, and the checks that may stop it. This base reports nothing and never stops."""

    log: logging.Logger | JobLogger = logging.getLogger("genworker.run")

    def stage(self, name: Stage) -> AbstractContextManager[None]:
        """Wraps one stage; entering may raise (cancel, time limit) to stop the run before the stage starts."""
        return _no_stage()

    def on_step(self, done: int, total: int) -> None:
        """A denoising step ended; raising stops the loop within that step."""

    def model_loaded(self, model_id: str, seconds: float) -> None:
        """``model_id`` was loaded into the cache (not found resident), taking ``seconds``."""

    def out_of_memory(self, stage: Stage) -> None:
        """``stage`` ran out of memory; the cache is about to be cleared and the stage tried once more."""

    def checkpoints(self) -> Checkpoints | None:
        """Where a resumable adapter keeps denoising checkpoints and finds one to resume; None: no checkpoints."""
        return None

    def previews(self) -> Previews | None:
        """Where a ``previewable`` adapter sends live previews of its latents; None: this run shows none."""
        return None

    def denoised(self) -> None:
        """The denoising stage ended (done or raised): its checkpoints may stop."""

    def compiled(self, model_id: str, graphs: int) -> None:
        """A compiled model compiled ``graphs`` new graphs during this job (its warm-up missed a shape)."""


@contextmanager
def _no_stage() -> Iterator[None]:
    yield


@dataclass(frozen=True)
class Rendered:
    """What a run produced: the job as run (``prompt`` is the prompt actually used) and its media."""

    job: ResolvedJob
    media: Media
    extension: PromptExtension | None
    gpu_seconds: float  # denoise and decode, retries included
    prompt_tokens: PromptTokens | None = None  # the used prompt against the text encoder's token limit
    resumed_from_step: int | None = None  # the denoising continued from a checkpoint taken after this step
    denoise_seconds: float = 0.0  # the denoising stage (retries included)
    flops: DenoiseFlops | None = None  # the denoisers' calls, counted after the job (``pipelines.runtime.flops``)
    device: str = "cpu"  # where the model ran (the peak MFU is taken against)


def run_pipeline(
    cache: ModelCache, spec: ModelSpec, job: ResolvedJob, hooks: RunHooks, *, image: Image | None = None
) -> Rendered:
    """Load ``spec``, extend the prompt if the job asks, denoise and decode; raises what the stages raise.

    ``image`` is the job's input image, checked and fitted (``worker.input_image``); it reaches the
    adapter's ``denoise`` (and ``extend_prompt``, for a rewrite that sees it) as ``image=`` and only when there
    is one, so text-only adapters never see it.
    Likewise ``checkpoints=`` (``hooks.checkpoints()``) reaches only adapters that declare ``resumable``, and
    ``previews=`` (``hooks.previews()``) only those that declare ``previewable``.
    """
    run = _Run(cache, spec, hooks)
    with hooks.stage(Stage.loading):
        adapter = run.with_oom_retry(Stage.loading, run.adapter)
    job, extension = run.extend_prompt(adapter, job, image)
    tokens = _prompt_tokens(adapter, job, hooks)
    started = time.perf_counter()
    with hooks.stage(Stage.denoising):
        conditioning: dict[str, Any] = {"image": image} if image is not None else {}
        if adapter.resumable and (checkpoints := hooks.checkpoints()) is not None:
            conditioning["checkpoints"] = checkpoints  # an OOM retry resumes from the latest one too
        if adapter.previewable and (previews := hooks.previews()) is not None:
            conditioning["previews"] = previews
        try:
            latents: Latents = run.with_oom_retry(Stage.denoising, lambda: run.denoise(job, conditioning))
        finally:
            hooks.denoised()
    denoise_seconds = time.perf_counter() - started
    # What the model layer measured while denoising comes back with the latents (``Latents.stats``).
    if latents.stats.compiled_graphs > 0:
        hooks.compiled(spec.id, latents.stats.compiled_graphs)
    with hooks.stage(Stage.decoding):
        # A retry decodes the same latents (on the reloaded model): the denoising work is kept.
        media = run.with_oom_retry(Stage.decoding, lambda: run.adapter().decode(latents, job))
    return Rendered(
        job,
        media,
        extension,
        time.perf_counter() - started,
        tokens,
        latents.resumed_from_step,
        denoise_seconds=denoise_seconds,
        flops=latents.stats.flops,
        device=adapter.device,
    )


def _prompt_tokens(adapter: Adapter, job: ResolvedJob, hooks: RunHooks) -> PromptTokens | None:
    """The used prompt's token count for the record, from adapters that can count (``prompt_tokens``): the
    pipelines cut a prompt past the text encoder's limit silently, so the record says it instead."""
    tokens = adapter.prompt_tokens(job)
    if tokens is None:
        return None
    if tokens.truncated:
        hooks.log.warning(
            "prompt past the text encoder's token limit: the rest is not seen",
            extra={"tokens": tokens.total, "kept": tokens.kept},
        )
    return tokens


class _Run:
    def __init__(self, cache: ModelCache, spec: ModelSpec, hooks: RunHooks) -> None:
        self._cache = cache
        self._spec = spec
        self._hooks = hooks

    def adapter(self) -> Adapter:
        """The resident adapter, loading it when it is not (the first time, or after an OOM cleared the cache)."""
        loads_before = self._cache.load_count()
        started = time.perf_counter()
        adapter = self._cache.get(self._spec)
        if self._cache.load_count() != loads_before:
            self._hooks.model_loaded(self._spec.id, time.perf_counter() - started)
        return adapter

    def denoise(self, job: ResolvedJob, conditioning: dict[str, Any]) -> Latents:
        """The adapter's ``denoise``; once more from step 0 when the checkpoint it resumed from does not fit
        its loop (``CheckpointMismatch``): that checkpoint is discarded first, so the second run finds none.

        Here, in the attempt, rather than through the queue: the job is not at fault, so it keeps its
        attempt, and the worker that found the checkpoint unusable is the one that already has the model."""
        try:
            return self.adapter().denoise(job, self._hooks.on_step, **conditioning)
        except CheckpointMismatch as e:
            checkpoints: Checkpoints | None = conditioning.get("checkpoints")
            if checkpoints is None:
                raise
            checkpoints.discard(str(e))
        return self.adapter().denoise(job, self._hooks.on_step, **conditioning)

    def extend_prompt(
        self, adapter: Adapter, job: ResolvedJob, image: Image | None
    ) -> tuple[ResolvedJob, PromptExtension | None]:
        if not job.prompt_extend:
            return job, None
        from pipelines.runtime.prompt_extend import extend_or_fallback

        with self._hooks.stage(Stage.extending_prompt):
            prompt_used, extension = extend_or_fallback(adapter, job, image=image)
        if extension.status == "fallback":
            self._hooks.log.warning(
                "prompt extension fell back to the original prompt", extra={"reason": extension.reason}
            )
        return job.model_copy(update={"prompt": prompt_used}), extension

    def with_oom_retry(self, stage: Stage, work: Callable[[], _T]) -> _T:
        """Out of memory: free every cached model and try once more; a second OOM fails the job.

        Retrying here rather than through the queue keeps the job on a worker whose memory was just
        freed, and a job that cannot fit never loops through the queue (``out_of_memory`` is terminal).
        """
        try:
            return work()
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            self._hooks.log.warning("out of memory: freeing the model cache and retrying once", extra={"stage": "oom"})
            self._hooks.out_of_memory(stage)
            self._cache.clear()  # unloads every model and returns the device's cached blocks
        return work()

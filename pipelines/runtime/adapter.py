"""The adapter contract between the worker and a model family.

An adapter is loaded once (``load``) and then serves many jobs, each in two calls the worker times as
two stages: ``denoise`` (the diffusion loop, reporting every step) returns the family's ``Latents``, and
``decode`` turns them into ``foundation.core.media.Media``. It never touches Redis, S3 or HTTP.

An ``image_to_video`` job also hands ``denoise`` its input image (``image=``, a PIL image the worker read
from the artifact store, checked against its sha256 and fitted to the generation size); text-only
adapters never receive the keyword.

A ``resumable`` adapter (Wan, LTX-2, and the generic adapter on a pipeline with a step callback)
also takes ``checkpoints=``
(``pipelines.runtime.resume.Checkpoints``): it checkpoints its denoising loop through it and resumes from the
stored checkpoint when its fingerprint matches, setting ``resumed_from_step`` on what it returns.

A ``previewable`` adapter (the same ones) also takes ``previews=`` (``pipelines.runtime.previews.Previews``):
it renders a live preview of its latents from the step callback whenever one is due.

Every family subclasses ``Adapter``: the base declares everything the worker reads of a loaded model
(``device``, ``profile``, ``resumable``, ``previewable``, ``prompt_tokens``), with defaults where a family has
nothing to say, so no caller reaches past it; ``pipelines.runtime.registry`` loads only such subclasses. What the
model layer measured while denoising (the denoisers' FLOPs, graphs compiled) comes back in the latents'
``stats``, so the worker never reaches into the model's pipeline. Families on a diffusers pipeline subclass
``pipelines.runtime.diffusers_adapter.DiffusersAdapter``, which fills most of this in.

``decode`` may be called again on the same latents (after an out-of-memory retry, possibly on a freshly
loaded adapter of the same model) and returns the same media: latents carry everything decoding needs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.core.catalog import ModelSpec, RuntimeProfile
    from foundation.core.contract import PromptTokens
    from foundation.core.media import Media, StepCallback
    from foundation.core.resolve import ResolvedJob
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.flops import DenoiseFlops
    from pipelines.runtime.previews import Previews
    from pipelines.runtime.resume import Checkpoints

__all__ = ["Adapter", "DenoiseStats", "Latents", "generate"]


@dataclass(frozen=True)
class DenoiseStats:
    """What the model layer measured during one ``denoise``: its denoisers' calls (``flops``; None for a model
    that records none) and the graphs compiled during it (a compiled model whose warm-up missed a shape)."""

    flops: DenoiseFlops | None = None
    compiled_graphs: int = 0


@dataclass(frozen=True)
class Latents:
    """The denoised state of one job, opaque to the worker; each family subclasses it (``WanLatents``).

    ``resumed_from_step``: the step a resumable adapter restored from a checkpoint (None: ran from step 0).
    ``stats``: what the model layer measured while denoising (the worker reports it; empty by default).
    """

    resumed_from_step: int | None = field(default=None, kw_only=True)
    # A plain (immutable) default, so it is a class attribute too: a subclass with its own ``__init__`` has it.
    stats: DenoiseStats = field(default=DenoiseStats(), kw_only=True)


class Adapter(ABC):
    """A loaded model family. ``load`` once, then ``denoise`` + ``decode`` per job (deterministic per seed)."""

    spec: ModelSpec
    # The keys this family accepts in a variant's ``pipeline_kwargs``; equal to
    # ``pipelines.runtime.options.FAMILY_OPTIONS[family]``, which a catalog is checked against before loading.
    options: ClassVar[frozenset[str]]
    # Where the model runs ("cuda", "cuda:1", "cpu"): the worker reads GPU memory and FLOPs of it.
    device: str
    # The runtime profile the model was loaded under (the catalog's, with the worker's overrides): the
    # worker warms up ``compile`` models before it reports ready.
    profile: RuntimeProfile
    # Whether ``denoise`` takes ``checkpoints=`` (resumable denoising, ``pipelines.runtime.resume``).
    resumable: bool = False
    # Whether ``denoise`` takes ``previews=`` (live previews of the latents, ``pipelines.runtime.previews``).
    previewable: bool = False

    def prompt_tokens(self, job: ResolvedJob) -> PromptTokens | None:
        """The used prompt's token count against the text encoder's limit, or None for a family that cannot
        count: the pipelines cut a prompt past the limit silently, so the job's record says it instead."""
        return None

    @classmethod
    @abstractmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> Adapter: ...

    @abstractmethod
    def denoise(
        self,
        job: ResolvedJob,
        on_step: StepCallback,
        *,
        image: Image | None = None,
        checkpoints: Checkpoints | None = None,
        previews: Previews | None = None,
    ) -> Latents:
        """Run the diffusion loop; ``on_step(done, total)`` after every step, and whatever it raises stops it.

        ``image`` is the input image of an ``image_to_video`` job, already checked and fitted by the worker:
        RGB, exactly ``(job.gen_width, job.gen_height)``; the worker passes it only to jobs that have one.
        ``checkpoints`` reaches only a ``resumable`` adapter, when the worker keeps checkpoints; ``previews``
        only a ``previewable`` one, when the job shows previews.
        """
        ...

    @abstractmethod
    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        """Decode what ``denoise`` returned for ``job`` into frames (and audio when the job asks for it)."""
        ...

    @abstractmethod
    def extend_prompt(
        self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int, image: Image | None = None
    ) -> str:
        """Rewrite ``prompt`` with more detail (text encoder or chat LLM); raise on failure.

        ``image``: an ``image_to_video`` job's input image as ``denoise`` gets it, for a rewrite that describes
        it; passed only to jobs that have one, like ``denoise``'s."""
        ...

    @abstractmethod
    def memory_bytes(self) -> int:
        """Bytes of weights and buffers this model holds now (0 once unloaded); the cache sizes models by it."""
        ...

    @abstractmethod
    def unload(self) -> None:
        """Free the model's memory (host and device)."""
        ...


def generate(adapter: Adapter, job: ResolvedJob, on_step: StepCallback, *, image: Image | None = None) -> Media:
    """Denoise and decode in one call, for benchmarks and tests (the worker runs them as two stages)."""
    return adapter.decode(adapter.denoise(job, on_step, image=image), job)

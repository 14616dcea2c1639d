"""The base of every adapter built on a diffusers pipeline: what each family used to repeat, written once.

Loading is a template, as diffusers' ``DiffusionPipeline.from_pretrained`` is: ``load`` resolves the weights,
reads the pipeline (``from_pretrained``), then ``assemble`` puts the LoRAs on it, lets the family prepare it, places
it under the runtime profile and builds the adapter. ``assemble`` is also what the full-size simulation and the
GPU bench run over a pipeline of random components, so what is measured is what serves. A family customises
small hooks, never the sequence:

- ``pipeline_class(spec)``: the diffusers class to read (required);
- ``denoisers_of(spec)``: the repeated-block transformers (attention backend, compile), ``denoisers`` by default;
- ``lora_source(spec, runtime, weights)``: what puts LoRAs on the pipeline (the variants' files by default);
- ``extra_parts(spec, weights)``: other modules the checkpoint brings (LTX-2's latent upsampler);
- ``prepare(spec, pipe, parts)``: the family's steps before the profile (after the LoRAs: FP8 and compile see them);
- ``attach(parts)``: the family's steps after the profile, on the built adapter.

Per job, ``denoise`` runs the family's ``run_denoise`` and reports what the model layer measured on the way in
the latents' ``stats``: the denoisers' calls (their FLOPs, ``pipelines.runtime.flops``) and the graphs compiled
during the call. Callers read the result, never the pipeline.

Per-model state (schedulers, cached embeddings, sibling pipelines) lives on the adapter; what must follow a
diffusers module (its cache recipe, its compiled forwards) lives in tables keyed weakly by the module
(``pipelines.runtime.profile``, ``pipelines.runtime.compile``), never as attributes stamped on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

from foundation.core.errors import ErrorCode, JobError
from pipelines.runtime import dtypes, lora, memory
from pipelines.runtime.adapter import Adapter, DenoiseStats, Latents
from pipelines.runtime.compile import compiled_graphs
from pipelines.runtime.flops import DenoiseFlops
from pipelines.runtime.profile import apply_profile, quiet_progress_bars, runtime_profile
from pipelines.runtime.registry import hub_revision, resolve_weights

if TYPE_CHECKING:
    from collections.abc import Callable

    from PIL.Image import Image

    from foundation.core.catalog import ModelSpec, RuntimeProfile
    from foundation.core.media import StepCallback
    from foundation.core.resolve import ResolvedJob
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.previews import Previews
    from pipelines.runtime.resume import Checkpoints

__all__ = ["DiffusersAdapter", "Weights", "step_reporter"]


@dataclass(frozen=True)
class Weights:
    """Where a model's weights are read from and how: the resolved path, ``from_pretrained``'s ``dtype=`` mapping
    and its pin (``revision=`` when read from the hub)."""

    path: str
    dtypes: dict[str, Any]
    pinned: dict[str, str]

    @classmethod
    def of(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, profile: RuntimeProfile, dtype: str) -> Weights:
        path = resolve_weights(spec.weights, runtime, tiny=spec.tiny)
        # Component dtypes from the profile: the shipped profiles keep VAEs (and image encoders) in float32
        # while the transformers and text encoders run in the model's dtype.
        return cls(path, dtypes.load_dtypes(profile, dtype), hub_revision(spec.weights, path, spec.revision))


class DiffusersAdapter(Adapter):
    """A loaded diffusers pipeline. Not thread-safe: one GPU loop calls ``denoise`` and ``decode``."""

    # The repeated-block transformers a pipeline of this family may have: the attention backend and regional
    # compile go on them (``denoisers_of`` may read the catalog entry instead).
    denoisers: ClassVar[tuple[str, ...]] = ("transformer", "transformer_2")
    # The denoisers whose calls are recorded for the FLOPs count (any the pipeline lacks are skipped).
    counted_denoisers: ClassVar[tuple[str, ...]] = ("transformer", "transformer_2")
    # Whether ``denoise`` records its denoisers' calls; off only where a caller measures the ops itself (the
    # full-size simulation, whose dispatch mode would count the recorder's meta copies as activations).
    records_flops = True

    def __init__(
        self,
        spec: ModelSpec,
        runtime: ModelRuntimeSettings,
        pipe: Any,
        *,
        device: str,
        dtype: str,
        profile: RuntimeProfile | None = None,
    ) -> None:
        self.spec = spec
        self.runtime = runtime
        self.profile = profile or spec.runtime
        # The diffusers pipeline: this adapter's own; nothing outside the model layer reads it.
        self.pipe = pipe
        self.device = device
        self.dtype = dtype
        self.init_state()

    def init_state(self) -> None:
        """The family's own state over ``self.pipe`` (schedulers, a second pipeline), set once the base's is:
        a family overrides this instead of the constructor."""

    # ------------------------------------------------------------------------------------------ loading

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> Self:
        """from_pretrained -> LoRAs -> runtime profile, with the family's hooks in between."""
        pipeline = cls.pipeline_class(spec)  # a missing class fails before anything is read
        quiet_progress_bars()
        model_profile = runtime_profile(spec, runtime)
        weights = Weights.of(spec, runtime, model_profile, dtype)
        replaced = cls.replaced_components(spec, weights)
        pipe = pipeline.from_pretrained(weights.path, dtype=weights.dtypes, **weights.pinned, **replaced)
        return cls.assemble(
            spec,
            runtime,
            pipe,
            device=device,
            dtype=dtype,
            profile=model_profile,
            loras=cls.lora_source(spec, runtime, weights),
            parts=cls.extra_parts(spec, weights),
        )

    @classmethod
    def assemble(
        cls,
        spec: ModelSpec,
        runtime: ModelRuntimeSettings,
        pipe: Any,
        *,
        device: str,
        dtype: str,
        profile: RuntimeProfile,
        loras: lora.LoraSource | None = None,
        parts: dict[str, Any] | None = None,
    ) -> Self:
        """Everything ``load`` does after ``from_pretrained``, on a pipeline from anywhere: the LoRAs from ``loras``
        (the files in production, random ones of the same ranks for the simulation and the bench), the family's
        ``prepare``, the runtime profile, the constructor, the family's ``attach``. One path, so what is measured
        is what serves."""
        parts = parts or {}
        if loras is not None:
            loras(pipe)  # before the profile: FP8 casting and compile see the LoRA layers
        cls.prepare(spec, pipe, parts)
        apply_profile(pipe, profile, device, denoisers=cls.denoisers_of(spec))
        adapter = cls(spec, runtime, pipe, device=device, dtype=dtype, profile=profile)
        adapter.attach(parts)
        return adapter

    @classmethod
    def pipeline_class(cls, spec: ModelSpec) -> Any:
        """The diffusers pipeline class this family reads its checkpoints with."""
        raise NotImplementedError(f"{cls.__name__} names no diffusers pipeline class")

    @classmethod
    def denoisers_of(cls, spec: ModelSpec) -> list[str]:
        """The repeated-block transformers of ``spec``'s pipeline (attention backend, regional compile)."""
        return list(cls.denoisers)

    @classmethod
    def lora_source(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, weights: Weights) -> lora.LoraSource | None:
        """What puts the LoRAs on the pipeline at load, switched off: every variant's file by default."""
        return lora.variant_lora_files(spec, runtime)

    @classmethod
    def replaced_components(cls, spec: ModelSpec, weights: Weights) -> dict[str, Any]:
        """Components read from elsewhere than the folder ``model_index.json`` names, handed to ``from_pretrained``
        in their place (it then reads nothing of theirs)."""
        return {}

    @classmethod
    def extra_parts(cls, spec: ModelSpec, weights: Weights) -> dict[str, Any]:
        """Modules the checkpoint brings beside the pipeline (read at load, handed to ``prepare`` and ``attach``)."""
        return {}

    @classmethod
    def prepare(cls, spec: ModelSpec, pipe: Any, parts: dict[str, Any]) -> None:
        """The family's steps on the pipeline after its LoRAs and before the runtime profile."""

    def attach(self, parts: dict[str, Any]) -> None:
        """The family's steps on the built adapter, after the runtime profile placed the pipeline."""

    # ------------------------------------------------------------------------------------------ denoise

    def denoise(
        self,
        job: ResolvedJob,
        on_step: StepCallback,
        *,
        image: Image | None = None,
        checkpoints: Checkpoints | None = None,
        previews: Previews | None = None,
    ) -> Latents:
        """The family's ``run_denoise``, with what the model layer measured during it in the result's ``stats``:
        the denoisers' calls (FLOPs counted on demand) and, for a compiled model, the graphs compiled."""
        flops = DenoiseFlops() if self.records_flops else None
        graphs_before = compiled_graphs() if self.profile.compile else 0
        pipe = self.loaded_pipe()
        with flops.recording(pipe, self.counted_denoisers) if flops is not None else contextlib.nullcontext():
            latents = self.run_denoise(job, on_step, image=image, checkpoints=checkpoints, previews=previews)
        graphs = compiled_graphs() - graphs_before if self.profile.compile else 0
        return dataclasses.replace(latents, stats=DenoiseStats(flops=flops, compiled_graphs=graphs))

    def run_denoise(
        self,
        job: ResolvedJob,
        on_step: StepCallback,
        *,
        image: Image | None = None,
        checkpoints: Checkpoints | None = None,
        previews: Previews | None = None,
    ) -> Latents:
        """The family's diffusion loop (``denoise``'s contract, ``pipelines.runtime.adapter``)."""
        raise NotImplementedError(f"{type(self).__name__} has no diffusion loop")

    # ------------------------------------------------------------------------------------------ memory

    def held_modules(self) -> list[Any]:
        """Modules this model holds beside its pipeline (a chat LLM, an upsampler): counted in ``memory_bytes``."""
        return []

    def memory_bytes(self) -> int:
        """Parameter and buffer bytes held by this model (its pipeline and ``held_modules``); 0 once unloaded."""
        return memory.module_bytes(self.pipe, *self.held_modules()) if self.pipe is not None else 0

    def unload(self) -> None:
        """Drop the pipeline and every per-model state (``release``), then give the device's memory back."""
        if self.pipe is not None and self.profile.offload != "none":
            self.pipe.remove_all_hooks()
        self.pipe = None
        self.release()
        memory.free_device_memory(self.device)

    def release(self) -> None:
        """Drop the family's per-model state on unload (schedulers, embeddings, sibling pipelines, an LLM)."""

    def loaded_pipe(self) -> Any:
        """The pipeline, or a coded error once the model was unloaded."""
        if self.pipe is None:
            raise JobError(ErrorCode.internal_error, f"{self.spec.id} was unloaded")
        return self.pipe

    def synchronize(self) -> None:
        """Wait for this model's device, so a stage's measured time is its own and not the next one's."""
        memory.synchronize(self.device)


def step_reporter(on_step: Callable[[int, int], None]) -> Any:
    """A diffusers ``callback_on_step_end`` calling ``on_step(done, total)``.

    diffusers calls it right after each scheduler step without catching anything, so whatever ``on_step``
    raises (``JobCanceled``) leaves the denoising loop at once: a cancel costs at most the step in flight.
    """

    def callback(pipe: Any, index: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        on_step(index + 1, int(pipe.num_timesteps))
        return tensors

    return callback

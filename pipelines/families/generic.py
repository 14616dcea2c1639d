"""Any diffusers video pipeline of the common call shape, driven by the catalog entry's ``diffusers`` block.

Most text-to-video pipelines in diffusers take the same call: prompt, negative prompt, height, width, frames,
steps, guidance, a generator and ``output_type="latent"``; their image-to-video twins add the image (one entry
serves one mode: its pipeline's). This adapter serves them from data
(``foundation.core.catalog.DiffusersSpec``): which class, the argument names where a pipeline differs, whether CFG
is a call argument or the pipeline's ``guider`` component, the options a variant may pass, and the decode path.
Families with special needs keep their own adapter (Wan 2.2's two experts: ``pipelines.families.wan``; LTX-2's audio and
two stages: ``pipelines.families.ltx2``).

Read top to bottom: ``load`` once (``pipelines.runtime.diffusers_adapter``'s template over the entry's class), then
per job ``denoise`` (check_inputs -> scheduler shift -> guidance -> diffusion loop to latents) and ``decode`` (the
VAE, as the catalog says). Facts handled here:
- the size and frame count are checked against the pipeline's own VAE compression and patch size before the
  call, because pipelines round other values silently; a pipeline that sizes the video from the image (no
  height/width keywords) is held to the job's size by the latents it returns;
- progress and cancel: through ``callback_on_step_end`` when the pipeline takes it, else by wrapping its
  scheduler's ``step`` for the call (HunyuanVideo 1.5 has no step callback); either way ``on_step`` runs after
  every step and whatever it raises leaves the loop at once; with the callback the job is also resumable
  from denoising checkpoints (``pipelines.runtime.resume``), without it not;
- the variant's ``flow_shift`` rebuilds the shipped scheduler from its config (``shift`` or ``flow_shift``);
- an entry may name an attention processor to replace the denoisers' own at load (``diffusers.attention_processor``:
  HunyuanVideo 1.5's without the dense L x L mask, ``pipelines.families.hunyuan15``), and a video processor to
  replace the pipeline's (``diffusers.video_processor``: HunyuanVideo 1.5 I2V's, which keeps the fitted size).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from foundation.core.errors import ErrorCode, JobError
from foundation.core.media import Media, StepCallback
from pipelines.errors import ModelLoadError, PromptExtendError
from pipelines.runtime import checks, output
from pipelines.runtime.adapter import Latents
from pipelines.runtime.diffusers_adapter import DiffusersAdapter, Weights
from pipelines.runtime.options import FAMILY_OPTIONS
from pipelines.runtime.previews import Previews
from pipelines.runtime.profile import apply_cache
from pipelines.runtime.resume import Checkpoints, DenoiseSession, job_fingerprint

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

    from foundation.core.catalog import DiffusersSpec, ModelSpec
    from foundation.core.resolve import ResolvedJob
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.lora import LoraSource

__all__ = ["DiffusersLatents", "DiffusersTextToVideo", "pipeline_class", "replace_attention", "replace_video_processor"]

# The denoising loop's version in checkpoint fingerprints: bump it with any change to ``denoise`` that changes
# what a checkpoint holds or how it is restored, so workers of another version start such jobs over instead
# of restoring them wrongly (``pipelines.runtime.resume``).
LOOP_VERSION = 1


@dataclass(frozen=True)
class DiffusersLatents(Latents):
    """Denoised latents exactly as the pipeline returns them for ``output_type="latent"``."""

    video: torch.Tensor


def replace_attention(pipe: Any, denoisers: list[str], ref: str) -> None:
    """Put the processor class ``ref`` ("module:Class") in place of every processor of ``denoisers`` that is an
    instance of its ``replaces``; ``ModelLoadError`` when it cannot be imported or replaces none."""
    processor_class = _imported(ref, "attention processor")
    replaced = 0
    for denoiser in denoisers:
        model = getattr(pipe, denoiser, None)
        if model is None:
            continue
        processors = dict(model.attn_processors)
        for key, processor in processors.items():
            if isinstance(processor, processor_class.replaces):
                processors[key] = processor_class()
                replaced += 1
        model.set_attn_processor(processors)
    if not replaced:
        raise ModelLoadError(f"attention processor {ref!r}: no {processor_class.replaces.__name__} to replace")


def replace_video_processor(pipe: Any, ref: str) -> None:
    """Put the video processor class ``ref`` ("module:Class") in place of ``pipe.video_processor``, built from the
    replaced one's config; ``ModelLoadError`` when it cannot be imported or the pipeline has no video processor."""
    processor_class = _imported(ref, "video processor")
    current = getattr(pipe, "video_processor", None)
    if current is None:
        raise ModelLoadError(f"video processor {ref!r}: {type(pipe).__name__} has no video_processor to replace")
    pipe.video_processor = processor_class.from_config(current.config)


def _imported(ref: str, what: str) -> Any:
    """The class a catalog entry names as "module:Class"; ``ModelLoadError`` saying ``what`` it was otherwise."""
    import importlib

    module_name, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as e:
        raise ModelLoadError(f"{what} {ref!r} cannot be imported: {e}") from e


def pipeline_class(name: str) -> Any:
    """The diffusers pipeline class ``name``, or ``ModelLoadError`` saying it is not in this diffusers."""
    import diffusers

    cls = getattr(diffusers, name, None)
    if not isinstance(cls, type) or not hasattr(cls, "from_pretrained"):
        raise ModelLoadError(f"diffusers {diffusers.__version__} has no pipeline class {name!r}")
    return cls


class DiffusersTextToVideo(DiffusersAdapter):
    """A loaded diffusers pipeline served from catalog data. Not thread-safe: one GPU loop calls it."""

    # The catalog checks each entry's options against its own ``diffusers.options`` (``self.options`` below
    # is per instance); the class-level table entry is empty, like FAMILY_OPTIONS["diffusers"].
    options: ClassVar[frozenset[str]] = FAMILY_OPTIONS["diffusers"]
    own_options: ClassVar[frozenset[str]] = frozenset()

    def init_state(self) -> None:
        pipe = self.pipe
        self.generic: DiffusersSpec = _generic_block(self.spec)
        self.allowed = frozenset(self.generic.options)
        self._call_keywords = frozenset(inspect.signature(type(pipe).__call__).parameters)
        # Resumable (``checkpoints=``, ``pipelines.runtime.resume``) when the pipeline has a step callback to hang the
        # session on; the denoisers' output shape is learned by one real forward on a resume.
        self.resumable = "callback_on_step_end" in self._call_keywords
        # Previews come from the step callback (``DenoiseSession``), or without one from the scheduler's output.
        self.previewable = True
        self._base_scheduler_config = dict(pipe.scheduler.config)
        self._shift: float | None = None
        self._guiders: dict[float, Any] = {}

    @classmethod
    def pipeline_class(cls, spec: ModelSpec) -> Any:
        return pipeline_class(_generic_block(spec).pipeline)

    @classmethod
    def denoisers_of(cls, spec: ModelSpec) -> list[str]:
        return list(_generic_block(spec).denoisers)

    @classmethod
    def lora_source(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, weights: Weights) -> LoraSource | None:
        """None: generic entries carry no LoRA variants."""
        return None

    @classmethod
    def prepare(cls, spec: ModelSpec, pipe: Any, parts: dict[str, Any]) -> None:
        """The entry's attention processor (before the profile: its backend is set on them) and video processor."""
        generic = _generic_block(spec)
        if generic.attention_processor is not None:
            replace_attention(pipe, generic.denoisers, generic.attention_processor)
        if generic.video_processor is not None:
            replace_video_processor(pipe, generic.video_processor)

    # ------------------------------------------------------------------------------------------ denoise

    def run_denoise(
        self,
        job: ResolvedJob,
        on_step: StepCallback,
        *,
        image: Image | None = None,
        checkpoints: Checkpoints | None = None,
        previews: Previews | None = None,
    ) -> DiffusersLatents:
        import torch

        pipe = self.loaded_pipe()
        checks.check_image(self.spec.id, job, image)  # the image its mode needs, at the generation size, and only it
        # 1. Check inputs against the pipeline's own compression (a mismatch is a catalog bug).
        self._check_inputs(job)
        apply_cache([m for n in self.generic.denoisers if (m := getattr(pipe, n, None)) is not None], job.cache)
        kwargs = checks.pipeline_options(self.spec.id, job, self.allowed)
        # 2. The variant's scheduler shift and guidance.
        self._set_shift(job.flow_shift)
        call = self._job_arguments(job, image)
        # 3. Denoise to latents; progress after every step, and whatever on_step raises stops the loop. With a
        # step callback the session also checkpoints and resumes (``pipelines.runtime.resume``).
        generator = torch.Generator(self.device).manual_seed(job.seed)
        if not self.resumable:
            with self._progress(pipe, on_step, job.steps, previews), torch.no_grad():
                latents = pipe(**call, generator=generator, output_type="latent", **kwargs).frames
            self.synchronize()
            return DiffusersLatents(self._sized(latents, job))
        session = DenoiseSession(
            on_step,
            total=job.steps,
            checkpoints=checkpoints,
            fingerprint=lambda: job_fingerprint(
                self.spec, job, pipe, profile=self.profile, device=self.device, loop_version=LOOP_VERSION
            ),
            generator=generator,
            previews=previews,
        )
        with session.running(pipe, denoisers=self.generic.denoisers), torch.no_grad():
            latents = pipe(
                **call, generator=generator, output_type="latent", callback_on_step_end=session.callback, **kwargs
            ).frames
        self.synchronize()
        return DiffusersLatents(self._sized(latents, job), resumed_from_step=session.resume_step or None)

    def _sized(self, latents: torch.Tensor, job: ResolvedJob) -> torch.Tensor:
        """``latents``, refused unless they are the job's size (a pipeline that sizes the video from the image may
        pick another than the one the worker fitted the image to: a catalog bug, never a silently other video)."""
        spatial = _vae_spatial(self.pipe)
        made = (int(latents.shape[-1]) * spatial, int(latents.shape[-2]) * spatial)
        if made != (job.gen_width, job.gen_height):
            raise JobError(
                ErrorCode.pipeline_error,
                f"{self.spec.id}: {type(self.pipe).__name__} made {made[0]}x{made[1]} latents' worth, "
                f"the job generates {job.gen_width}x{job.gen_height}",
            )
        return latents

    def _job_arguments(self, job: ResolvedJob, image: Image | None) -> dict[str, Any]:
        """The call's job-driven keywords under the pipeline's names (guidance on the guider when it has one; the
        image for an image_to_video job)."""
        values: dict[str, Any] = {
            "prompt": job.prompt,
            "negative_prompt": job.negative_prompt,
            "height": job.gen_height,
            "width": job.gen_width,
            "num_frames": job.num_frames,
            "num_inference_steps": job.steps,
            "guidance_scale": job.guidance_scale,
        }
        if image is not None:
            values["image"] = image
        if self.generic.guidance == "guider":
            self._set_guider(values.pop("guidance_scale"))
        call = {}
        for ours, value in values.items():
            name = self.generic.call_name(ours)
            if not name:
                continue
            if name not in self._call_keywords:
                raise JobError(
                    ErrorCode.pipeline_error,
                    f"{self.spec.id}: {type(self.pipe).__name__} takes no {name!r}; "
                    f"map {ours!r} to its keyword in diffusers.arguments",
                )
            call[name] = value
        return call

    def _check_inputs(self, job: ResolvedJob) -> None:
        pipe = self.pipe
        spatial = _vae_spatial(pipe)
        temporal = _first_int(pipe, ("vae_scale_factor_temporal", "vae_temporal_compression_ratio"), default=4)
        denoiser = getattr(pipe, self.generic.denoisers[0])
        patch = getattr(denoiser.config, "patch_size", 1) or 1
        patch = int(patch[-1] if isinstance(patch, (list, tuple)) else patch)
        checks.check_job_shape(self.spec.id, job, spatial=spatial * patch, temporal=temporal)

    @contextlib.contextmanager
    def _progress(self, pipe: Any, on_step: StepCallback, steps: int, previews: Previews | None) -> Iterator[None]:
        """Progress for a pipeline without a step callback: its scheduler's ``step`` reports each step (the
        wrapper lives on the instance for this call only), and previews its output when one is due."""
        scheduler = pipe.scheduler
        original = scheduler.step
        done = 0

        def step(*args: Any, **kwargs: Any) -> Any:
            nonlocal done
            out = original(*args, **kwargs)
            done += 1
            if previews is not None and previews.due(done, steps):
                sample = out[0] if isinstance(out, tuple) else getattr(out, "prev_sample", None)
                if sample is not None and sample.ndim == 5:
                    previews.show(done, steps, sample)
            on_step(done, steps)
            return out

        scheduler.step = step
        try:
            yield
        finally:
            del scheduler.step

    def _set_shift(self, shift: float | None) -> None:
        """Rebuild the scheduler from the shipped config with the variant's shift (cheap; only on change)."""
        if shift is None or shift == self._shift:
            return
        config = self._base_scheduler_config
        key = "flow_shift" if "flow_shift" in config else "shift" if "shift" in config else None
        if key is None:
            raise JobError(
                ErrorCode.pipeline_error,
                f"{self.spec.id}: scheduler {type(self.pipe.scheduler).__name__} has no shift to set",
            )
        self.pipe.scheduler = type(self.pipe.scheduler).from_config(config, **{key: shift})
        self._shift = shift

    def _set_guider(self, guidance_scale: float) -> None:
        """Give the pipeline a guider with the variant's scale (one per scale, built once)."""
        if guidance_scale not in self._guiders:
            self._guiders[guidance_scale] = self.pipe.guider.new(guidance_scale=guidance_scale)
        self.pipe.guider = self._guiders[guidance_scale]

    # ------------------------------------------------------------------------------------------ decode

    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        """Latents -> video (1, 3, F, H, W) in [-1, 1] by the catalog's decode path; frames leave as uint8."""
        import torch

        if not isinstance(latents, DiffusersLatents):
            raise JobError(ErrorCode.internal_error, f"{self.spec.id} cannot decode {type(latents).__name__}")
        pipe = self.loaded_pipe()
        decode = self.generic.decode
        with torch.no_grad():
            if decode.kind == "method":
                assert decode.method is not None
                video: torch.Tensor = getattr(pipe, decode.method)(latents.video)
            else:
                video = pipe.vae.decode(self._vae_input(latents.video), return_dict=False)[0]
        pipe.maybe_free_model_hooks()  # with model offload: the VAE goes back to the CPU
        self.synchronize()
        return output.media_from_video(self.spec.id, job, video)

    def _vae_input(self, latents: torch.Tensor) -> torch.Tensor:
        import torch
        from diffusers.utils.torch_utils import get_module_execution_device

        vae = self.pipe.vae
        denoised = latents.to(get_module_execution_device(vae), dtype=vae.dtype)
        config = vae.config
        if self.generic.decode.kind == "scaling_factor":
            scaled: torch.Tensor = denoised / config.scaling_factor
            return scaled
        shape = (1, denoised.shape[1], 1, 1, 1)
        mean = torch.tensor(config.latents_mean).view(shape).to(denoised.device, denoised.dtype)
        std = torch.tensor(config.latents_std).view(shape).to(denoised.device, denoised.dtype)
        return denoised * std + mean

    # ------------------------------------------------------------------------------------------ the rest

    def extend_prompt(
        self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int, image: Image | None = None
    ) -> str:
        """Generic entries carry no prompt extension (the catalog refuses ``prompt_extend`` for them)."""
        raise PromptExtendError(f"{self.spec.id} has no prompt extension")

    def release(self) -> None:
        self._guiders.clear()


def _generic_block(spec: ModelSpec) -> DiffusersSpec:
    """The entry's ``diffusers`` block, which this adapter is driven by."""
    if spec.diffusers is None:
        raise ModelLoadError(f"{spec.id}: the generic adapter needs the entry's diffusers block")
    return spec.diffusers


def _vae_spatial(pipe: Any) -> int:
    """The pipeline's own VAE spatial compression (its attribute's name differs between pipelines)."""
    return _first_int(pipe, ("vae_scale_factor_spatial", "vae_spatial_compression_ratio"), default=8)


def _first_int(obj: Any, names: tuple[str, ...], *, default: int) -> int:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int):
            return value
    return default

"""Wan text-to-video (diffusers ``WanPipeline``): Wan 2.1 T2V 1.3B/14B and Wan 2.2 T2V-A14B (two experts).

Read top to bottom: ``load`` once (``pipelines.runtime.diffusers_adapter``'s template over ``WanPipeline``), then
per job ``denoise`` (check_inputs -> scheduler -> negative prompt -> diffusion loop) and ``decode`` (VAE).
Wan-specific facts handled here:
- the variant's ``flow_shift`` rebuilds the shipped scheduler from its config (UniPC calls it ``flow_shift``,
  flow-match Euler ``shift``), and so does its ``sampler``: the checkpoints ship UniPC at solver order 2 with
  its corrector, which the standard recipes keep; the step-distilled recipes (lightx2v's 4-step LoRAs) sample
  with UniPC at order 1 with the corrector off on every step, which is exactly the first-order flow-Euler
  step they were distilled for;
- Wan 2.2 A14B switches from ``transformer`` (high noise, ``guidance_scale``) to ``transformer_2`` (low noise,
  ``guidance_scale_2``) at ``boundary_ratio`` of the schedule; the ratio arrives in ``pipeline_kwargs``;
- diffusers defaults the negative prompt to ``""``: the reference one from the job is passed explicitly,
  and its embedding is computed once per model and reused (it is constant);
- ``denoise`` stops at ``output_type="latent"`` and ``decode`` runs the VAE itself, so frames leave the
  device as uint8 chunks and the worker times decoding as a stage of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from foundation.core.contract import PromptTokens
from foundation.core.errors import ErrorCode, JobError, is_out_of_memory
from foundation.core.media import Media, StepCallback
from pipelines.errors import PromptExtendError
from pipelines.families.system_prompts import wan_system_prompt
from pipelines.runtime import checks, output
from pipelines.runtime.adapter import Latents
from pipelines.runtime.diffusers_adapter import DiffusersAdapter
from pipelines.runtime.lora import apply_lora
from pipelines.runtime.options import FAMILY_OPTIONS
from pipelines.runtime.profile import apply_cache
from pipelines.runtime.prompt_extend import ChatLLM, finish_extension
from pipelines.runtime.resume import Checkpoints, DenoiseSession, job_fingerprint

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

    from foundation.core.catalog import ModelSpec
    from foundation.core.resolve import ResolvedJob
    from pipelines.runtime.previews import Previews

__all__ = ["WanLatents", "WanTextToVideo"]

DEFAULT_MAX_SEQUENCE_LENGTH = 512  # UMT5 context used by every Wan checkpoint
# The denoising loop's version in checkpoint fingerprints (Wan and Wan image-to-video share the loop): bump it
# with any change to ``_denoise_with`` that changes what a checkpoint holds or how it is restored, so workers
# of another version start such jobs over instead of restoring them wrongly (``pipelines.runtime.resume``).
LOOP_VERSION = 1


def skipped_wan_output(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What a Wan transformer returns, as zeros: (B, out_channels, F', H', W') like its latent input (a step
    being replayed on resume computes nothing; ``pipelines.runtime.resume``)."""
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    channels = module.config.out_channels or module.config.in_channels
    out = hidden.new_zeros((hidden.shape[0], channels, *hidden.shape[2:]))
    return (out,) if kwargs.get("return_dict", True) is False else Transformer2DModelOutput(sample=out)


def wan_expert(pipe: Any, timestep: Any) -> str | None:
    """Which expert ran the step at ``timestep``: Wan 2.2 A14B switches at ``boundary_ratio`` of the schedule
    (as ``WanPipeline.__call__``); None for single-transformer checkpoints."""
    ratio = pipe.config.boundary_ratio
    if ratio is None:
        return None
    boundary = ratio * pipe.scheduler.config.num_train_timesteps
    return "transformer" if timestep >= boundary else "transformer_2"


@dataclass(frozen=True)
class WanLatents(Latents):
    """Denoised video latents (1, z_dim, F', H', W') as the pipeline returns them: still normalised."""

    video: torch.Tensor


class WanTextToVideo(DiffusersAdapter):
    """A loaded Wan pipeline. Not thread-safe: one GPU loop calls ``denoise`` and ``decode``."""

    # Variant options (``pipeline_kwargs``), one table with the catalog's check at load: ``boundary_ratio``
    # is applied here, the rest are keywords of ``WanPipeline.__call__``.
    options: ClassVar[frozenset[str]] = FAMILY_OPTIONS["wan"]
    own_options: ClassVar[frozenset[str]] = frozenset({"boundary_ratio"})

    def init_state(self) -> None:
        pipe = self.pipe
        self._base_scheduler_config = dict(pipe.scheduler.config)
        self._scheduler_key: tuple[Any, ...] | None = None  # (shift, sampler, steps) the scheduler was built for
        self._negative: tuple[tuple[str, int], torch.Tensor] | None = None
        self._llm: ChatLLM | None = None
        self._llm_error: str | None = None  # a chat LLM that failed to load is not retried on every job

    @classmethod
    def pipeline_class(cls, spec: ModelSpec) -> Any:
        """``WanPipeline``; the profile keeps the VAE in float32 while the transformers and UMT5 run in bf16
        (official ``WanVAE(dtype=torch.float)``; diffusers' Wan docs). The variants' LoRAs are loaded switched off."""
        from diffusers import WanPipeline

        return WanPipeline

    # ------------------------------------------------------------------------------------------ denoise

    # ``denoise`` takes ``checkpoints=`` and resumes from one (``pipelines.runtime.resume``), and ``previews=``.
    resumable = True
    previewable = True

    def run_denoise(
        self,
        job: ResolvedJob,
        on_step: StepCallback,
        *,
        image: Image | None = None,
        checkpoints: Checkpoints | None = None,
        previews: Previews | None = None,
    ) -> WanLatents:
        if image is not None:  # the worker hands images to image_to_video adapters only (WanImageToVideo)
            raise ValueError(f"{self.spec.id} generates from text; it takes no input image")
        return self._denoise_with(self.loaded_pipe(), job, on_step, checkpoints, previews)

    def _denoise_with(
        self,
        pipe: Any,
        job: ResolvedJob,
        on_step: StepCallback,
        checkpoints: Checkpoints | None,
        previews: Previews | None,
        **conditioning: Any,
    ) -> WanLatents:
        """The diffusion loop on ``pipe`` (this model's pipeline, or one sharing its components), with the
        family's conditioning keywords (``image=`` for image-to-video) passed through to its call."""
        import torch

        # 1. Check inputs (the resolver guarantees them; a mismatch is a catalog bug, not a user error).
        self._check_inputs(job)
        apply_cache([m for m in (pipe.transformer, pipe.transformer_2) if m is not None], job.cache)
        apply_lora(self.pipe, job)  # the variant's LoRA on, or every LoRA off (the modules are shared)
        kwargs = checks.pipeline_options(self.spec.id, job, self.options)
        max_sequence_length = int(kwargs.pop("max_sequence_length", DEFAULT_MAX_SEQUENCE_LENGTH))
        # 2. Scheduler (shift and solver) and, for two-expert checkpoints, where the experts switch.
        self._set_scheduler(job)
        self._set_boundary(kwargs.pop("boundary_ratio", None))
        if pipe is not self.pipe:  # a pipeline sharing this one's modules follows its scheduler and boundary
            pipe.scheduler = self.pipe.scheduler
            pipe.register_to_config(boundary_ratio=self.pipe.config.boundary_ratio)
        if job.guidance_scale_2 is not None:
            kwargs["guidance_scale_2"] = job.guidance_scale_2
        # 3. The constant negative prompt, encoded once.
        negative = None
        if job.guidance_scale > 1.0:
            negative = self._negative_embeds(job.negative_prompt, max_sequence_length)
        # 4. Denoise to latents; the step callback reports progress and may raise to cancel. With checkpoints,
        # the session saves the loop's state now and then, and resumes from a stored one (``pipelines.runtime.resume``).
        generator = torch.Generator(self.device).manual_seed(job.seed)
        session = DenoiseSession(
            on_step,
            total=job.steps,
            checkpoints=checkpoints,
            fingerprint=lambda: job_fingerprint(
                self.spec, job, pipe, profile=self.profile, device=self.device, loop_version=LOOP_VERSION
            ),
            generator=generator,
            skip_output=skipped_wan_output,
            expert=wan_expert,
            previews=previews,
        )
        with session.running(pipe):
            latents = pipe(
                prompt=job.prompt,
                negative_prompt_embeds=negative,
                height=job.gen_height,
                width=job.gen_width,
                num_frames=job.num_frames,
                num_inference_steps=job.steps,
                guidance_scale=job.guidance_scale,
                generator=generator,
                output_type="latent",
                callback_on_step_end=session.callback,
                max_sequence_length=max_sequence_length,
                **conditioning,
                **kwargs,
            ).frames
        self.synchronize()
        return WanLatents(latents, resumed_from_step=session.resume_step or None)

    def _check_inputs(self, job: ResolvedJob) -> None:
        pipe = self.pipe
        patch = (pipe.transformer or pipe.transformer_2).config.patch_size
        spatial = pipe.vae_scale_factor_spatial * patch[1]
        checks.check_job_shape(self.spec.id, job, spatial=spatial, temporal=pipe.vae_scale_factor_temporal)

    def _set_scheduler(self, job: ResolvedJob) -> None:
        """Rebuild the scheduler from the shipped config with the variant's shift and solver (cheap; only on change).

        A ``sampler`` (catalog ``SamplerSpec``) sets UniPC's ``solver_order``, and ``corrector: false`` lists every
        step of the job in ``disable_corrector``. Why order 1 without the corrector for the distilled LoRAs:
        lightx2v samples them with ``WanStepDistillScheduler`` (ModelTC/LightX2V
        lightx2v/models/schedulers/wan/step_distill/scheduler.py @f8aee98b, ``step_post``: x0 = x - sigma * v,
        then re-noised to the next sigma with the same v), which is x + (sigma_next - sigma) * v, the flow-Euler
        step; UniPC's order-1 predictor on flow sigmas is that same update, and its corrector (on by default)
        would add a second-order term the distillation never saw. The schedule is the checkpoint's own: with
        shift 5 and 4 steps UniPC gives timesteps 999/937/833/625 and sigmas within 1e-3 of lightx2v's
        1000/937.5/833.33/625 (its ``denoising_step_list`` [1000, 750, 500, 250] shifted by 5): UniPC truncates
        timesteps to integers. ``WanPipeline`` calls only ``set_timesteps(num_inference_steps)``, so an exact
        copy would need a scheduler class of our own that ignores the step count; the integer timesteps are the
        whole difference, and the pipeline's own scheduler class keeps resume and the fingerprint unchanged.
        """
        sampler = job.sampler
        key = (job.flow_shift, sampler, job.steps if sampler is not None and not sampler.corrector else None)
        if key == self._scheduler_key:
            return
        config = self._base_scheduler_config
        override: dict[str, Any] = {}
        if job.flow_shift is not None:
            if "flow_shift" in config:  # UniPCMultistepScheduler (the Wan checkpoints' scheduler)
                override["flow_shift"] = job.flow_shift
            elif "shift" in config:  # FlowMatchEulerDiscreteScheduler
                override["shift"] = job.flow_shift
            else:
                raise JobError(
                    ErrorCode.pipeline_error,
                    f"{self.spec.id}: scheduler {type(self.pipe.scheduler).__name__} has no shift to set",
                )
        if sampler is not None:
            if "solver_order" not in config or "disable_corrector" not in config:
                raise JobError(
                    ErrorCode.pipeline_error,
                    f"{self.spec.id}: the variant's sampler needs UniPC; the weights ship "
                    f"{type(self.pipe.scheduler).__name__}",
                )
            override["solver_order"] = sampler.solver_order
            override["disable_corrector"] = [] if sampler.corrector else list(range(job.steps))
        self.pipe.scheduler = type(self.pipe.scheduler).from_config(config, **override)
        self._scheduler_key = key

    def _set_boundary(self, boundary_ratio: float | None) -> None:
        if boundary_ratio is None:
            return
        if self.pipe.transformer_2 is None:
            raise JobError(
                ErrorCode.pipeline_error,
                f"{self.spec.id}: boundary_ratio needs a second expert (transformer_2) in the weights",
            )
        if self.pipe.config.boundary_ratio != boundary_ratio:
            self.pipe.register_to_config(boundary_ratio=float(boundary_ratio))

    def _negative_embeds(self, negative_prompt: str, max_sequence_length: int) -> torch.Tensor:
        import torch

        key = (negative_prompt, max_sequence_length)
        if self._negative is None or self._negative[0] != key:
            with torch.no_grad():
                embeds, _ = self.pipe.encode_prompt(
                    prompt=negative_prompt,
                    do_classifier_free_guidance=False,
                    max_sequence_length=max_sequence_length,
                    device=self.pipe._execution_device,
                )
            self._negative = (key, embeds)
        return self._negative[1]

    # ------------------------------------------------------------------------------------------ decode

    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        """Latents -> video (1, 3, F, H, W) in [-1, 1] on the VAE's device (what WanPipeline does, minus numpy).

        Frames leave the device as uint8 chunks when the encoder pulls them.
        """
        import torch
        from diffusers.utils.torch_utils import get_module_execution_device

        if not isinstance(latents, WanLatents):
            raise JobError(ErrorCode.internal_error, f"{self.spec.id} cannot decode {type(latents).__name__}")
        pipe = self.loaded_pipe()
        vae = pipe.vae
        denoised = latents.video.to(get_module_execution_device(vae), dtype=vae.dtype)
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean).view(shape).to(denoised.device, denoised.dtype)
        std = torch.tensor(vae.config.latents_std).view(shape).to(denoised.device, denoised.dtype)
        with torch.no_grad():
            video: torch.Tensor = vae.decode(denoised * std + mean, return_dict=False)[0]
        pipe.maybe_free_model_hooks()  # with model offload: the VAE goes back to the CPU
        self.synchronize()
        return output.media_from_video(self.spec.id, job, video)

    # ------------------------------------------------------------------------------------------ prompt

    def extend_prompt(
        self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int, image: Image | None = None
    ) -> str:
        """Rewrite ``prompt`` with the catalog's chat LLM (loaded on first use and kept with the model) and the
        official system prompt of the entry's upstream task (``prompt_extend.system_prompt``)."""
        settings = self.spec.prompt_extend
        if settings is None or settings.method != "chat_llm" or not settings.llm or not settings.system_prompt:
            raise PromptExtendError(f"{self.spec.id} has no chat LLM for prompt extension")
        if image is not None:  # the catalog refuses chat_llm on image models; upstream uses a vision-language model
            raise PromptExtendError(f"{self.spec.id}: a chat LLM cannot see the input image")
        system_prompt = wan_system_prompt(settings.system_prompt, settings.language, image=False, prompt=prompt)
        if self._llm_error is not None:
            raise PromptExtendError(f"the chat LLM failed to load earlier: {self._llm_error}")
        if self._llm is None:
            try:
                self._llm = ChatLLM.load(
                    settings.llm,
                    self.runtime,
                    tiny=self.spec.tiny,
                    device=self.device,
                    dtype=self.dtype,
                    revision=settings.llm_revision,
                )
            except Exception as e:
                if not is_out_of_memory(e):  # out of memory may pass once memory is freed: not remembered
                    self._llm_error = f"{type(e).__name__}: {e}"
                raise
        started = time.perf_counter()
        raw = self._llm.rewrite(
            system_prompt,
            prompt,
            max_new_tokens=max_new_tokens,
            timeout_s=timeout_s,
            seed=seed,
        )
        return finish_extension(raw, started=started, timeout_s=timeout_s)

    def prompt_tokens(self, job: ResolvedJob) -> PromptTokens:
        """The job's prompt against UMT5's limit, cleaned and tokenized as ``WanPipeline`` encodes it."""
        from diffusers.pipelines.wan.pipeline_wan import prompt_clean

        limit = int(job.pipeline_kwargs.get("max_sequence_length", DEFAULT_MAX_SEQUENCE_LENGTH))
        return checks.count_prompt_tokens(self.loaded_pipe().tokenizer, prompt_clean(job.prompt), limit)

    # ------------------------------------------------------------------------------------------ memory

    def held_modules(self) -> list[Any]:
        """The chat LLM, once loaded: it is kept with the model and counted with it."""
        return [self._llm.model] if self._llm is not None and self._llm.model is not None else []

    def release(self) -> None:
        self._negative = None
        if self._llm is not None:
            self._llm.unload()
            self._llm = None

"""LTX-2 text-to-video with stereo audio (diffusers ``LTX2Pipeline``), both streams denoised together.

Read top to bottom: ``load`` once (``pipelines.runtime.diffusers_adapter``'s template over ``LTX2Pipeline``, with
the two-stage recipe's upsampler and distilled LoRA), then per job ``denoise`` (check_inputs -> prompt embeddings ->
stage 1 -> [x2 latent upsampler -> stage 2]) and ``decode`` (video VAE, then audio VAE and vocoder). Two recipes:
- one stage (a catalog entry without ``two_stage``): the whole schedule at the job's size;
- two stages (``two_stage``, Lightricks' production recipe, ``ltx_pipelines/ti2vid_two_stages.py``): stage 1
  at half the size with CFG, ``LTX2LatentUpsamplePipeline`` doubles the latents, stage 2 re-noises them to
  the first refinement sigma and runs the distilled sigmas with the distilled LoRA and CFG off. The video
  comes from stage 2, the audio from stage 1 (upstream discards stage 2's audio). A ``distilled`` variant is
  upstream's ``distilled.py``: stage 1 is the 8 distilled sigmas with the LoRA on and CFG off, and both
  streams come from stage 2. Sizes are multiples of 64, so stage 1 stays on the VAE's 32 stride.
LTX-2 facts handled here:
- stage 1 samples ltx-core's sigma list (shift taken at 4,096 tokens, stretched to 0.1: ``stage_1_sigmas``),
  not the pipeline's default, which shifts by the job's real token count;
- frames must be 8k+1 and sizes multiples of 32: the pipeline silently shortens other frame counts (and
  sizes its audio for the unshortened length), so a mismatch is refused here rather than trusted;
- by default a step runs CFG plus STG plus modality-isolation passes; STG and modality guidance are off
  here unless the variant's ``pipeline_kwargs`` turn them on (LTX-2.0 also wants ``use_cross_timestep``
  false, which the variant sets);
- the waveform is stereo at ``vocoder.config.output_sampling_rate`` (24 kHz on LTX-2.0), not the
  audio VAE's 16 kHz, and slightly shorter than the video: it is trimmed or padded to the kept frames;
- without ``audio`` the audio latents are still denoised (the streams attend to each other), but the
  audio VAE and vocoder never run;
- a distilled checkpoint (LTX-2.5's ``transformer/``: ``two_stage`` without a LoRA) runs the distilled recipe
  with nothing switched; from LTX-2.5 on upstream's distilled stage 1 steps with ltx-core's ancestral Euler
  (``ancestral_step``: eta 1, fresh noise from the job's generator, video then audio) and the refinement with
  plain Euler;
- LTX-2.5 decodes the video with its diffusion decoder (``diffusion_decoder``: an ``LTX2VideoDiffusionDecoderModel``,
  one x0 step from noise of the job's generator, tiled like the VAE); on CUDA its neighborhood attention runs on
  NATTEN's kernels, as upstream's decoder, since the default FlexAttention path, uncompiled, builds the dense
  score matrix (tens of GB at video sizes);
- ``image_to_video`` runs ``LTX2ImageToVideoPipeline`` built once over the loaded modules (``pipeline_over``: no
  copy, no cast): the image, re-compressed as H.264 at the checkpoint's CRF (33 for the Gemma-3 generation, as
  ltx-pipelines' ``load_image_and_preprocess``), is latent frame 0, never noised; in the two-stage recipe
  the refinement gets the image encoded again at full size as its frame 0.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from foundation.core.contract import PromptTokens
from foundation.core.errors import ErrorCode, JobError
from foundation.core.media import AudioTrack, Media, StepCallback
from pipelines.errors import ModelLoadError, PromptExtendError
from pipelines.runtime import checks, output
from pipelines.runtime.adapter import Latents
from pipelines.runtime.diffusers_adapter import DiffusersAdapter, Weights
from pipelines.runtime.options import FAMILY_OPTIONS
from pipelines.runtime.previews import Previews, unpack_tokens
from pipelines.runtime.profile import apply_cache
from pipelines.runtime.prompt_extend import finish_extension, seeded_rng
from pipelines.runtime.resume import Checkpoints, DenoiseSession, job_fingerprint
from pipelines.runtime.sibling import pipeline_over

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

    from foundation.core.catalog import ModelSpec
    from foundation.core.resolve import ResolvedJob
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.lora import LoraSource

__all__ = ["GUIDANCE_OFF", "LTX2Latents", "LTX2TextToVideo", "ancestral_step"]

# One batched (CFG) transformer pass per step. A variant turns STG or modality guidance on explicitly.
GUIDANCE_OFF: dict[str, float] = {
    "stg_scale": 0.0,
    "audio_stg_scale": 0.0,
    "modality_scale": 1.0,
    "audio_modality_scale": 1.0,
}
# diffusers' LTX-2 enhancement sampling (GEMMA3_PROMPT_ENHANCEMENT_CONFIG), plus our time bound.
_ENHANCE_SAMPLING: dict[str, Any] = {"do_sample": True, "temperature": 0.7}
DEFAULT_MAX_SEQUENCE_LENGTH = 1024  # Gemma-3 context LTX2Pipeline encodes prompts with
# The denoising loop's version in checkpoint fingerprints: bump it with any change to ``denoise`` or ``_run``
# that changes what a checkpoint holds (the carried stage-1 output included) or how it is restored, so workers
# of another version start such jobs over instead of restoring them wrongly (``pipelines.runtime.resume``).
# 2: stage 1 on ltx-core's sigma list (``stage_1_sigmas``) instead of the pipeline's token-count shift.
LOOP_VERSION = 2
LORA_ADAPTER = "distilled"
# ltx-core's LTX2Scheduler defaults (packages/ltx-core/src/ltx_core/components/schedulers.py, Lightricks/LTX-2
# @400fd31054597515f47125691032c04b1c3ee24e). The official pipelines call ``execute(steps=N)`` with no latent,
# so the shift is always taken at MAX_SHIFT_ANCHOR tokens: mu is max_shift (2.05) whatever the job's size.
_STAGE_1_MAX_SHIFT = 2.05
_STAGE_1_TERMINAL = 0.1


def stage_1_sigmas(steps: int) -> list[float]:
    """The ``steps`` non-zero sigmas of ltx-core's stage-1 schedule (the pipeline appends the final 0.0).

    diffusers' LTX-2 pipelines shift by the job's real token count instead, a different schedule at every size
    and length but one; upstream's list is passed as given so every job samples what Lightricks sampled.
    """
    if steps == 1:  # the stretch would divide by zero (upstream's tensor turns to NaN): one step from pure noise
        return [1.0]
    shift = math.exp(_STAGE_1_MAX_SHIFT)
    shifted = [shift / (shift + (1.0 / (1.0 - i / steps) - 1.0)) for i in range(steps)]
    # Stretched so the last non-zero sigma lands on the terminal value, as upstream's ``stretch=True``.
    scale = (1.0 - shifted[-1]) / (1.0 - _STAGE_1_TERMINAL)
    return [1.0 - (1.0 - sigma) / scale for sigma in shifted]


def ancestral_step(
    sample: torch.Tensor, velocity: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """ltx-core's ``EulerAncestralDiffusionStep`` at eta 1 (``components/diffusion_steps.py``, Lightricks/LTX-2
    @400fd31054597515f47125691032c04b1c3ee24e), from the rectified-flow velocity: an Euler step down to
    ``sigma_next**2 / sigma``, then fresh noise back up to ``sigma_next`` (variance preserving); the prediction
    itself at the last sigma. In float32, as upstream."""
    x = sample.float()
    denoised = x - sigma * velocity.float()
    if float(sigma_next) == 0.0:
        return denoised
    sigma_down = sigma_next**2 / sigma
    ratio = sigma_down / sigma
    stepped = ratio * x + (1.0 - ratio) * denoised
    alpha_next, alpha_down = 1.0 - sigma_next, 1.0 - sigma_down
    renoise = (sigma_next**2 - sigma_down**2 * alpha_next**2 / alpha_down**2).clamp(min=0.0).sqrt()
    return (alpha_next / alpha_down) * stepped + renoise * noise.float()


class _SharedGenerator:
    """The job's generator, shared by the pipeline's video scheduler and the audio scheduler it deep-copies from it
    (a copied ``torch.Generator`` would repeat the video's noise for the audio)."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def __deepcopy__(self, memo: dict[int, Any]) -> _SharedGenerator:
        return self


@functools.cache
def _ancestral_scheduler_class() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.schedulers.scheduling_flow_match_euler_discrete import FlowMatchEulerDiscreteSchedulerOutput
    from diffusers.utils.torch_utils import randn_tensor

    class AncestralEulerScheduler(FlowMatchEulerDiscreteScheduler):  # type: ignore[misc]
        """``FlowMatchEulerDiscreteScheduler`` whose step is ``ancestral_step``; the parent's step keeps the step
        index (its own update is discarded)."""

        noise: _SharedGenerator | None = None

        def step(self, model_output: Any, timestep: Any, sample: Any, *args: Any, **kwargs: Any) -> Any:
            import torch

            return_dict = kwargs.pop("return_dict", True)
            super().step(model_output, timestep, sample, *args, return_dict=False, **kwargs)
            sigma, sigma_next = self.sigmas[self.step_index - 1], self.sigmas[self.step_index]
            if self.noise is None:
                raise RuntimeError("the ancestral sampler draws from the job's generator: set .noise first")
            noise = randn_tensor(
                sample.shape, generator=self.noise.generator, device=sample.device, dtype=torch.float32
            )
            prev = ancestral_step(sample, model_output, sigma, sigma_next, noise).to(model_output.dtype)
            return FlowMatchEulerDiscreteSchedulerOutput(prev_sample=prev) if return_dict else (prev,)

    return AncestralEulerScheduler


def skipped_ltx2_output(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What the LTX-2 transformer returns, as zeros: video and audio tokens (B, S, C_out) like its packed
    inputs (a step being replayed on resume computes nothing; ``pipelines.runtime.resume``)."""
    from diffusers.models.transformers.transformer_ltx2 import AudioVisualModelOutput

    video = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    audio = kwargs["audio_hidden_states"] if "audio_hidden_states" in kwargs else args[1]
    out = video.new_zeros((*video.shape[:2], module.proj_out.out_features))
    audio_out = audio.new_zeros((*audio.shape[:2], module.audio_proj_out.out_features))
    if kwargs.get("return_dict", True) is False:
        return (out, audio_out)
    return AudioVisualModelOutput(sample=out, audio_sample=audio_out)


@dataclass(frozen=True)
class LTX2Latents(Latents):
    """What decoding needs: denormalised video latents (1, C, F', H', W'), denormalised and unpacked audio
    latents, and the seeded generator's state after denoising (decode-time noise continues from it)."""

    video: torch.Tensor
    audio: torch.Tensor
    generator_state: torch.Tensor


@dataclass(frozen=True)
class _Stage:
    """One call of the pipeline: its size, schedule, guidance and whether the distilled LoRA is on."""

    width: int
    height: int
    steps: int
    guidance_scale: float
    sigmas: list[float]  # run as given: the scheduler's own shift is off (``_scheduler``)
    lora: bool
    guided: bool = True  # False: no guidance of any kind (the refinement: CFG, STG and modality off)
    ancestral: bool = False  # stepped with ``ancestral_step`` (LTX-2.5's distilled stage 1)


class LTX2TextToVideo(DiffusersAdapter):
    """A loaded LTX-2 pipeline. Not thread-safe: one GPU loop calls ``denoise`` and ``decode``."""

    # Variant options (``pipeline_kwargs``), one table with the catalog's check at load: keywords of
    # ``LTX2Pipeline.__call__``, except ``distilled`` (applied here) and the two ``decode_*`` ones, which
    # ``decode`` applies.
    options: ClassVar[frozenset[str]] = FAMILY_OPTIONS["ltx2"]
    own_options: ClassVar[frozenset[str]] = frozenset({"distilled"})

    denoisers: ClassVar[tuple[str, ...]] = ("transformer",)

    def init_state(self) -> None:
        pipe = self.pipe
        self.upsample_pipe: Any = None  # the two-stage recipe's x2 latent upsampler (``attach``)
        # The checkpoint's (False), the as-given one every stage runs (True) and the ancestral one ("ancestral").
        self._schedulers: dict[bool | str, Any] = {False: pipe.scheduler}
        self._image_pipe: Any = None  # LTX2ImageToVideoPipeline over the same modules (image_to_video jobs)
        self.video_decoder: Any = None  # LTX-2.5's diffusion video decoder (``attach``), None: the VAE decodes

    @classmethod
    def pipeline_class(cls, spec: ModelSpec) -> Any:
        from diffusers import LTX2Pipeline

        return LTX2Pipeline

    @classmethod
    def lora_source(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, weights: Weights) -> LoraSource | None:
        """The two-stage recipe's distilled LoRA, under ``LORA_ADAPTER`` (no variant of LTX-2 has a LoRA file)."""
        recipe = spec.two_stage
        if recipe is None or recipe.distilled_lora is None:
            return None
        weight_name = recipe.distilled_lora

        def distilled_lora(pipe: Any) -> None:
            pipe.load_lora_weights(weights.path, weight_name=weight_name, adapter_name=LORA_ADAPTER, **weights.pinned)

        return distilled_lora

    @classmethod
    def replaced_components(cls, spec: ModelSpec, weights: Weights) -> dict[str, Any]:
        """The transformer from the entry's own subfolder (LTX-2.5's full model in ``transformer_full/``, beside
        the distilled ``transformer/`` that ``model_index.json`` names), as diffusers' LTX-2.5 docs load it."""
        if spec.transformer is None:
            return {}
        from diffusers import LTX2VideoTransformer3DModel

        dtype = weights.dtypes.get("transformer", weights.dtypes["default"])
        transformer = LTX2VideoTransformer3DModel.from_pretrained(
            weights.path, subfolder=spec.transformer, dtype=dtype, **weights.pinned
        )
        return {"transformer": transformer}

    @classmethod
    def extra_parts(cls, spec: ModelSpec, weights: Weights) -> dict[str, Any]:
        """The two-stage recipe's x2 latent upsampler and LTX-2.5's diffusion video decoder, each from its subfolder
        of the checkpoint."""
        parts: dict[str, Any] = {}
        if spec.two_stage is not None:
            from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel

            dtype = weights.dtypes.get("latent_upsampler", weights.dtypes["default"])
            parts["latent_upsampler"] = LTX2LatentUpsamplerModel.from_pretrained(
                weights.path, subfolder=spec.two_stage.upsampler, dtype=dtype, **weights.pinned
            )
        if spec.diffusion_decoder is not None:
            from diffusers import LTX2VideoDiffusionDecoderModel

            dtype = weights.dtypes.get("diffusion_decoder", weights.dtypes["default"])
            parts["diffusion_decoder"] = LTX2VideoDiffusionDecoderModel.from_pretrained(
                weights.path, subfolder=spec.diffusion_decoder, dtype=dtype, **weights.pinned
            )
        return parts

    @classmethod
    def prepare(cls, spec: ModelSpec, pipe: Any, parts: dict[str, Any]) -> None:
        """For the two-stage recipe (its x2 latent upsampler in ``parts``, and the distilled LoRA put on the
        pipeline under ``LORA_ADAPTER``: the file in production, a random one of its rank at full size), the LoRA
        set to the recipe's scale and switched off."""
        if (spec.two_stage is None) != ("latent_upsampler" not in parts):
            raise ModelLoadError(f"{spec.id}: the two-stage recipe needs its upsampler and LoRA, and only it")
        if (spec.diffusion_decoder is None) != ("diffusion_decoder" not in parts):
            raise ModelLoadError(f"{spec.id}: the diffusion decoder is loaded for an entry that names one, and only it")
        if spec.two_stage is not None and spec.two_stage.distilled_lora is not None:
            pipe.set_adapters([LORA_ADAPTER], [spec.two_stage.lora_scale])
            pipe.disable_lora()

    def attach(self, parts: dict[str, Any]) -> None:
        """The upsampler's pipeline, sharing the main pipeline's VAE; the diffusion video decoder."""
        if "diffusion_decoder" in parts:
            self.video_decoder = self._placed_decoder(parts["diffusion_decoder"])
        if "latent_upsampler" not in parts:
            return
        from diffusers import LTX2LatentUpsamplePipeline

        upsample_pipe = LTX2LatentUpsamplePipeline(vae=self.pipe.vae, latent_upsampler=parts["latent_upsampler"])
        # Small (about 1 GB real): resident whatever the offload.
        upsample_pipe.latent_upsampler.to(self.device)
        upsample_pipe.set_progress_bar_config(disable=True)
        self.upsample_pipe = upsample_pipe

    def _placed_decoder(self, decoder: Any) -> Any:
        """LTX-2.5's diffusion decoder on the device (0.42 B parameters: resident whatever the offload), tiled as
        the profile tiles the VAE; on CUDA on NATTEN's neighborhood-attention kernels (``kernels`` fetches them),
        upstream's, in place of FlexAttention, whose uncompiled path builds the dense score matrix."""
        import torch

        decoder.to(self.device)
        if self.profile.vae_tiling:
            decoder.enable_tiling()
        if torch.device(self.device).type == "cuda":
            from diffusers.models.autoencoders.ltx2_diffusion_decoder import LTX2VideoVaeNeighborhoodNattenProcessor

            try:
                decoder.set_attn_processor(LTX2VideoVaeNeighborhoodNattenProcessor())
            except (ImportError, ValueError) as exc:  # no ``kernels`` package, or remote code disabled
                raise ModelLoadError(f"{self.spec.id}: the diffusion decoder needs NATTEN's kernels: {exc}") from exc
        return decoder

    @property
    def sample_rate(self) -> int:
        """Waveform rate of the vocoder output (24 kHz on LTX-2.0, 48 kHz on 2.3+)."""
        return int(self.loaded_pipe().vocoder.config.output_sampling_rate)

    # ------------------------------------------------------------------------------------------ denoise

    # ``denoise`` takes ``checkpoints=`` and resumes from one (``pipelines.runtime.resume``), in either stage; and
    # ``previews=``, of the packed video latents laid back out as frames (``unpack_tokens``).
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
    ) -> LTX2Latents:
        import torch

        pipe = self.loaded_pipe()
        conditioning = {"image": image} if checks.check_image(self.spec.id, job, image) is not None else {}
        # 1. Check inputs: the pipeline would silently shorten a non-8k+1 clip.
        temporal, spatial = pipe.vae_temporal_compression_ratio, pipe.vae_spatial_compression_ratio
        two_stage = self.spec.two_stage is not None
        checks.check_job_shape(self.spec.id, job, spatial=spatial * (2 if two_stage else 1), temporal=temporal)
        apply_cache([pipe.transformer], job.cache)  # both stages: the variant's cache recipe, or none
        # 2. Guidance: one pass per step unless the variant asks for more.
        kwargs: dict[str, Any] = {**GUIDANCE_OFF, **checks.pipeline_options(self.spec.id, job, self.options)}
        distilled = bool(kwargs.pop("distilled", False))
        max_sequence_length = int(kwargs.pop("max_sequence_length", DEFAULT_MAX_SEQUENCE_LENGTH))
        # 3. Prompt embeddings, once for both stages (the text encoder runs once per job).
        audio_guidance = float(kwargs.get("audio_guidance_scale", _call_default(pipe, "audio_guidance_scale")))
        embeds = self._encode(job, max_sequence_length, cfg=max(job.guidance_scale, audio_guidance) > 1.0)
        stages = self._stages(job, distilled)
        generator = torch.Generator(self.device).manual_seed(job.seed)
        # Steps count across both stages; checkpoints carry stage 1's output once it exists, so a resume in
        # stage 2 skips stage 1 (the stage-2 loop state, generator included, comes from the checkpoint).
        session = DenoiseSession(
            on_step,
            total=sum(stage.steps for stage in stages),
            checkpoints=checkpoints,
            fingerprint=lambda: job_fingerprint(
                self.spec,
                job,
                pipe,
                profile=self.profile,
                device=self.device,
                loop_version=LOOP_VERSION,
                scheduler=self._schedulers[False],
            ),
            generator=generator,
            skip_output=skipped_ltx2_output,
            previews=previews,
            preview_latents=self._preview_latents(job) if previews is not None else None,
        )
        # 4. Stage 1: the whole clip (half the size in the two-stage recipe).
        first = stages[0]
        carried = session.carried("stage1_video"), session.carried("stage1_audio")
        if two_stage and session.resume_step > first.steps and carried[0] is not None and carried[1] is not None:
            session.skip_steps(first.steps)
            video, audio = carried[0].to(self.device), carried[1].to(self.device)
        else:
            out = self._run(first, job, embeds, kwargs, generator=generator, session=session, **conditioning)
            video, audio = out.frames, out.audio
        if two_stage:
            session.carry(stage1_video=video, stage1_audio=audio)
            # 5. x2 latent upsampler, then 6. the distilled refinement at full size. A carried stage-1 output that
            # does not fit fails in the upsampler: the checkpoint's fault (``restoring``), not the job's.
            with session.restoring():
                video = self.upsample_pipe(latents=video, output_type="latent", return_dict=False)[0]
            if image is not None:  # the refinement is conditioned on the image at full size, as upstream's
                video = self._image_as_first_frame(video, image)
            refine = self._run(
                stages[1],
                job,
                embeds,
                kwargs,
                generator=generator,
                session=session,
                latents=video,
                audio_latents=audio,
            )
            video = refine.frames
            if distilled:
                audio = refine.audio  # distilled.py keeps stage 2's audio; ti2vid_two_stages.py stage 1's
        self.synchronize()
        # Decoding continues this generator (decode-time noise), as inside the pipeline: keep its state.
        return LTX2Latents(
            video=video,
            audio=audio,
            generator_state=generator.get_state(),
            resumed_from_step=session.resume_step or None,
        )

    def _preview_latents(self, job: ResolvedJob) -> Callable[[dict[str, Any]], torch.Tensor | None]:
        """The step callback's packed video latents as (batch, channels, frames, height, width); either stage's
        size (the first is half the second in the two-stage recipe) keeps the job's aspect."""
        pipe = self.loaded_pipe()
        frames = (job.num_frames - 1) // pipe.vae_temporal_compression_ratio + 1
        patched = (pipe.transformer_spatial_patch_size, pipe.transformer_temporal_patch_size) != (1, 1)
        aspect = job.gen_width / job.gen_height

        def view(tensors: dict[str, Any]) -> torch.Tensor | None:
            return None if patched else unpack_tokens(tensors.get("latents"), frames, aspect)

        return view

    def _stages(self, job: ResolvedJob, distilled: bool) -> list[_Stage]:
        from diffusers.pipelines.ltx2.utils import DISTILLED_SIGMA_VALUES

        recipe = self.spec.two_stage
        # Upstream's one-stage and two-stage pipelines both sample stage 1 on ltx-core's list.
        if recipe is None:
            sigmas = stage_1_sigmas(job.steps)
            return [_Stage(job.gen_width, job.gen_height, job.steps, job.guidance_scale, sigmas, lora=False)]
        sigmas = list(DISTILLED_SIGMA_VALUES) if distilled else stage_1_sigmas(job.steps)
        ancestral = distilled and recipe.distilled_sampler == "ancestral"
        half = _Stage(
            job.gen_width // 2,
            job.gen_height // 2,
            job.steps,
            job.guidance_scale,
            sigmas,
            lora=distilled,
            ancestral=ancestral,
        )
        refine = list(recipe.refine_sigmas)
        return [half, _Stage(job.gen_width, job.gen_height, len(refine), 1.0, refine, lora=True, guided=False)]

    def _encode(self, job: ResolvedJob, max_sequence_length: int, *, cfg: bool) -> dict[str, Any]:
        import torch

        pipe = self.pipe
        with torch.no_grad():
            positive, positive_mask, negative, negative_mask = pipe.encode_prompt(
                prompt=job.prompt,
                negative_prompt=job.negative_prompt,
                do_classifier_free_guidance=cfg,
                max_sequence_length=max_sequence_length,
                device=pipe._execution_device,
            )
        embeds = {"prompt_embeds": positive, "prompt_attention_mask": positive_mask}
        if cfg:
            embeds |= {"negative_prompt_embeds": negative, "negative_prompt_attention_mask": negative_mask}
        return embeds

    def _run(
        self,
        stage: _Stage,
        job: ResolvedJob,
        embeds: dict[str, Any],
        kwargs: dict[str, Any],
        *,
        generator: torch.Generator,
        session: DenoiseSession,
        **extra: Any,
    ) -> Any:
        """One pipeline call to latents; a refinement re-noises the given latents to its first sigma.

        An image_to_video job runs ``LTX2ImageToVideoPipeline`` over the same modules: stage 1 encodes the
        image as latent frame 0 and keeps it clean; a refinement keeps the given frame 0 (the image encoded
        at full size, ``_image_as_first_frame``) clean likewise.
        """
        lora_pipe = self.pipe
        pipe = self._image_pipeline() if job.mode == checks.IMAGE_MODE else lora_pipe
        if self.spec.two_stage is not None and self.spec.two_stage.distilled_lora is not None:
            if stage.lora:
                lora_pipe.enable_lora()
            else:
                lora_pipe.disable_lora()
        # Every stage's sigmas run as given (no dynamic shift), as upstream runs all its schedules.
        pipe.scheduler = self._ancestral_scheduler(generator) if stage.ancestral else self._scheduler(as_is=True)
        if "latents" in extra:
            extra["noise_scale"] = stage.sigmas[0]
        if not stage.guided:
            kwargs = {**kwargs, **GUIDANCE_OFF, "audio_guidance_scale": 1.0}
        audio_guidance = float(kwargs.get("audio_guidance_scale", _call_default(pipe, "audio_guidance_scale")))
        cfg = max(stage.guidance_scale, audio_guidance) > 1.0
        prompt = {k: v for k, v in embeds.items() if cfg or not k.startswith("negative")}
        with session.running(pipe, denoisers=["transformer"]):
            return pipe(
                **prompt,
                height=stage.height,
                width=stage.width,
                num_frames=job.num_frames,
                frame_rate=float(job.fps),
                num_inference_steps=stage.steps,
                sigmas=stage.sigmas,
                guidance_scale=stage.guidance_scale,
                generator=generator,
                output_type="latent",
                callback_on_step_end=session.callback,
                **kwargs,
                **extra,
            )

    def _image_as_first_frame(self, latents: torch.Tensor, image: Image) -> torch.Tensor:
        """``latents`` (raw VAE space, 1, C, F', H', W') with latent frame 0 replaced by the image's own latent,
        prepared as ``LTX2ImageToVideoPipeline`` prepares it (H.264 re-compression, then the VAE's mode)."""
        import numpy as np
        import PIL.Image
        import torch
        from diffusers.pipelines.ltx2.utils import apply_image_conditioning_crf, resolve_default_image_crf

        pipe = self._image_pipeline()
        crf = resolve_default_image_crf(pipe.text_encoder)
        if crf:
            image = PIL.Image.fromarray(apply_image_conditioning_crf(np.asarray(image.convert("RGB")), crf))
        height, width = (
            latents.shape[3] * pipe.vae_spatial_compression_ratio,
            latents.shape[4] * pipe.vae_spatial_compression_ratio,
        )
        pixels = pipe.video_processor.preprocess(image, height=height, width=width).unsqueeze(2)
        with torch.no_grad():
            first = pipe.vae.encode(pixels.to(latents.device, pipe.vae.dtype)).latent_dist.mode()
        return torch.cat([first.to(latents.dtype), latents[:, :, 1:]], dim=2)

    def _image_pipeline(self) -> Any:
        """``LTX2ImageToVideoPipeline`` sharing every module of the loaded pipeline (built once, no copy)."""
        if self._image_pipe is None:
            from diffusers import LTX2ImageToVideoPipeline

            self._image_pipe = pipeline_over(LTX2ImageToVideoPipeline, self.loaded_pipe())
        return self._image_pipe

    def _ancestral_scheduler(self, generator: torch.Generator) -> Any:
        """The as-given scheduler stepping with ``ancestral_step``, its noise from ``generator``."""
        if "ancestral" not in self._schedulers:
            self._schedulers["ancestral"] = _ancestral_scheduler_class().from_config(self._scheduler(as_is=True).config)
        scheduler = self._schedulers["ancestral"]
        scheduler.noise = _SharedGenerator(generator)
        return scheduler

    def _scheduler(self, *, as_is: bool) -> Any:
        if as_is not in self._schedulers:
            base = self._schedulers[False]
            self._schedulers[as_is] = type(base).from_config(
                base.config, use_dynamic_shifting=False, shift_terminal=None, shift=1.0
            )
        return self._schedulers[as_is]

    # ------------------------------------------------------------------------------------------ decode

    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        import torch

        if not isinstance(latents, LTX2Latents):
            raise JobError(ErrorCode.internal_error, f"{self.spec.id} cannot decode {type(latents).__name__}")
        pipe = self.loaded_pipe()
        generator = torch.Generator(self.device)
        generator.set_state(latents.generator_state)
        # 4. Decode the video.
        video = self._decode_video(latents.video, generator, dict(job.pipeline_kwargs))
        # 5. Decode the audio only when the job wants it.
        audio = self._decode_audio(latents.audio) if job.audio else None
        pipe.maybe_free_model_hooks()
        self.synchronize()
        return output.media_from_video(self.spec.id, job, video, audio)

    def _decode_video(self, latents: torch.Tensor, generator: torch.Generator, kwargs: dict[str, Any]) -> torch.Tensor:
        """Denormalised latents -> video (1, 3, F, H, W) in [-1, 1], as LTX2Pipeline decodes them."""
        import torch
        from diffusers.utils.torch_utils import get_module_execution_device, randn_tensor

        pipe = self.pipe
        if self.video_decoder is not None:  # LTX-2.5: one x0 step of the diffusion decoder, from the job's noise
            decoder = self.video_decoder
            with torch.no_grad(), warnings.catch_warnings():
                # Off CUDA (the tiny models) FlexAttention runs unfused, as torch warns; CUDA runs NATTEN instead.
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
                decoded: torch.Tensor = decoder.decode(
                    latents.to(self.device, decoder.dtype), generator=generator, return_dict=False
                )[0]
            return decoded
        vae = pipe.vae
        latents = latents.to(get_module_execution_device(vae))
        timestep = None
        if vae.config.timestep_conditioning:
            # Decode-time noise is mixed in the normalised space, then the latents are denormalised again.
            decode_timestep = float(kwargs.get("decode_timestep", 0.0))
            noise_scale = kwargs.get("decode_noise_scale")
            noise_scale = decode_timestep if noise_scale is None else float(noise_scale)
            scaling = vae.config.scaling_factor
            normal = pipe._normalize_latents(latents, vae.latents_mean, vae.latents_std, scaling)
            noise = randn_tensor(normal.shape, generator=generator, device=normal.device, dtype=normal.dtype)
            normal = (1 - noise_scale) * normal + noise_scale * noise
            latents = pipe._denormalize_latents(normal, vae.latents_mean, vae.latents_std, scaling)
            timestep = torch.tensor([decode_timestep], device=latents.device, dtype=latents.dtype)
        with torch.no_grad():
            video: torch.Tensor = vae.decode(latents.to(vae.dtype), timestep, return_dict=False)[0]
        return video

    def _decode_audio(self, audio_latents: torch.Tensor) -> AudioTrack:
        import torch
        from diffusers.utils.torch_utils import get_module_execution_device

        pipe = self.pipe
        audio_vae = pipe.audio_vae
        audio_latents = audio_latents.to(get_module_execution_device(audio_vae), dtype=audio_vae.dtype)
        with torch.no_grad():
            mel = audio_vae.decode(audio_latents, return_dict=False)[0]
            waveform = pipe.vocoder(mel.to(pipe.vocoder.dtype))
        return output.audio_track(waveform, self.sample_rate)

    # ------------------------------------------------------------------------------------------ prompt

    def extend_prompt(
        self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int, image: Image | None = None
    ) -> str:
        """Rewrite ``prompt`` with the pipeline's own Gemma-3 text encoder and Lightricks' system prompt: the
        text-to-video one, or for an image job the image-to-video one with the image (the fitted input image,
        the video's first frame), which Gemma-3's vision tower sees (``enhance_prompt(image=)`` scales its long
        side to 896 as upstream's ``generate_enhanced_prompt``).

        The texts are diffusers' (``pipelines/ltx2/utils.py``), the ones the installed pipeline ships: they are
        Lightricks' ``gemma3_{t2v,i2v}_system_prompt.txt`` (LTX-2 packages/ltx-core/.../encoders/prompts/) with
        the lines re-wrapped, not byte-equal (tests/pipelines/test_prompt_extend.py pins both digests). Taken
        from the library that runs the model so the prompt and the template that formats it change together."""
        from diffusers.pipelines.ltx2.utils import I2V_DEFAULT_SYSTEM_PROMPT, T2V_DEFAULT_SYSTEM_PROMPT

        pipe = self.loaded_pipe()
        if getattr(pipe, "processor", None) is None:
            raise PromptExtendError(f"{self.spec.id} has no processor: its text encoder cannot enhance prompts")
        conditioning = {"image": image} if image is not None else {}
        started = time.perf_counter()
        with seeded_rng(seed, self.device):
            texts = pipe.enhance_prompt(
                prompt,
                system_prompt=T2V_DEFAULT_SYSTEM_PROMPT if image is None else I2V_DEFAULT_SYSTEM_PROMPT,
                max_new_tokens=max_new_tokens,
                seed=seed,
                generation_kwargs={**_ENHANCE_SAMPLING, "max_time": timeout_s},
                **conditioning,
            )
        return finish_extension(texts[0] if texts else "", started=started, timeout_s=timeout_s)

    def prompt_tokens(self, job: ResolvedJob) -> PromptTokens:
        """The job's prompt against Gemma-3's limit, stripped and tokenized as ``LTX2Pipeline`` encodes it."""
        limit = int(job.pipeline_kwargs.get("max_sequence_length", DEFAULT_MAX_SEQUENCE_LENGTH))
        return checks.count_prompt_tokens(self.loaded_pipe().tokenizer, job.prompt.strip(), limit)

    # ------------------------------------------------------------------------------------------ memory

    def held_modules(self) -> list[Any]:
        """The two-stage recipe's upsampler (the distilled LoRA is on the pipeline) and the diffusion decoder."""
        held = [self.upsample_pipe.latent_upsampler] if self.upsample_pipe is not None else []
        return held + ([self.video_decoder] if self.video_decoder is not None else [])

    def release(self) -> None:
        self.upsample_pipe = None
        self.video_decoder = None
        self._image_pipe = None
        self._schedulers.clear()


def _call_default(pipe: Any, name: str) -> Any:
    """The default of a keyword of the pipeline's ``__call__`` (what it uses when a variant leaves it out)."""
    import inspect

    return inspect.signature(type(pipe).__call__).parameters[name].default

"""LTX-2 text-to-video with stereo audio (diffusers ``LTX2Pipeline``), one pass for both streams.

Read top to bottom: ``load`` once, then per job ``denoise`` (check_inputs -> guidance -> diffusion loop)
and ``decode`` (video VAE, then audio VAE and vocoder). LTX-2 facts handled here:
- frames must be 8k+1 and sizes multiples of 32: the pipeline silently shortens other frame counts (and
  sizes its audio for the unshortened length), so a mismatch is refused here rather than trusted;
- by default a step runs CFG plus STG plus modality-isolation passes; STG and modality guidance are off
  here unless the variant's ``pipeline_kwargs`` turn them on (LTX-2.0 also wants ``use_cross_timestep``
  false, which the variant sets);
- the waveform is stereo at ``vocoder.config.output_sampling_rate`` (24 kHz on LTX-2.0), not the
  audio VAE's 16 kHz, and slightly shorter than the video: it is trimmed or padded to the kept frames;
- without ``audio`` the audio latents are still denoised (the streams attend to each other), but the
  audio VAE and vocoder never run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pipelines.adapter import Latents
from pipelines.prompt_extend import LTX2_T2V_SYSTEM_PROMPT, PromptExtendError, finish_extension, seeded_rng
from pipelines.registry import resolve_weights
from pipelines.runtime import (
    apply_runtime,
    check_job_shape,
    fit_audio,
    free_device_memory,
    media_from_video,
    module_bytes,
    pipeline_options,
    quiet_progress_bars,
    step_reporter,
    synchronize,
    torch_dtype,
)
from worker.core.catalog import FAMILY_OPTIONS
from worker.core.errors import ErrorCode, JobError
from worker.core.media import AudioTrack, Media, StepCallback

if TYPE_CHECKING:
    import torch

    from pipelines.config import ModelRuntimeSettings
    from worker.core.catalog import ModelSpec
    from worker.core.resolve import ResolvedJob

__all__ = ["GUIDANCE_OFF", "LTX2Latents", "LTX2TextToVideo"]

# One batched (CFG) transformer pass per step. A variant turns STG or modality guidance on explicitly.
GUIDANCE_OFF: dict[str, float] = {
    "stg_scale": 0.0,
    "audio_stg_scale": 0.0,
    "modality_scale": 1.0,
    "audio_modality_scale": 1.0,
}
# diffusers' LTX-2 enhancement sampling (GEMMA3_PROMPT_ENHANCEMENT_CONFIG), plus our time bound.
_ENHANCE_SAMPLING: dict[str, Any] = {"do_sample": True, "temperature": 0.7}


@dataclass(frozen=True)
class LTX2Latents(Latents):
    """What decoding needs: denormalised video latents (1, C, F', H', W'), denormalised and unpacked audio
    latents, and the seeded generator's state after denoising (decode-time noise continues from it)."""

    video: torch.Tensor
    audio: torch.Tensor
    generator_state: torch.Tensor


class LTX2TextToVideo:
    """A loaded LTX-2 pipeline. Not thread-safe: one GPU loop calls ``denoise`` and ``decode``."""

    # Variant options (``pipeline_kwargs``), one table with the catalog's check at load: keywords of
    # ``LTX2Pipeline.__call__``; the two ``decode_*`` ones
    # are applied by ``decode``.
    options: ClassVar[frozenset[str]] = FAMILY_OPTIONS["ltx2"]
    own_options: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, spec: ModelSpec, runtime: ModelRuntimeSettings, pipe: Any, *, device: str, dtype: str) -> None:
        self.spec = spec
        self.runtime = runtime
        self.pipe = pipe
        self.device = device
        self.dtype = dtype

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> LTX2TextToVideo:
        from diffusers import LTX2Pipeline

        quiet_progress_bars()
        path = resolve_weights(spec.weights, runtime, tiny=spec.tiny)
        pipe = LTX2Pipeline.from_pretrained(path, dtype=torch_dtype(dtype))
        apply_runtime(pipe, runtime, device, denoisers=["transformer"])
        return cls(spec, runtime, pipe, device=device, dtype=dtype)

    @property
    def sample_rate(self) -> int:
        """Waveform rate of the vocoder output (24 kHz on LTX-2.0, 48 kHz on 2.3+)."""
        return int(self._pipe().vocoder.config.output_sampling_rate)

    # ------------------------------------------------------------------------------------------ denoise

    def denoise(self, job: ResolvedJob, on_step: StepCallback) -> LTX2Latents:
        import torch

        pipe = self._pipe()
        # 1. Check inputs: the pipeline would silently shorten a non-8k+1 clip.
        temporal, spatial = pipe.vae_temporal_compression_ratio, pipe.vae_spatial_compression_ratio
        check_job_shape(self.spec.id, job, spatial=spatial, temporal=temporal)
        # 2. Guidance: one pass per step unless the variant asks for more.
        kwargs: dict[str, Any] = {**GUIDANCE_OFF, **pipeline_options(self.spec.id, job, self.options)}
        # 3. Denoise video and audio latents together.
        generator = torch.Generator(self.device).manual_seed(job.seed)
        out = pipe(
            prompt=job.prompt,
            negative_prompt=job.negative_prompt,
            height=job.gen_height,
            width=job.gen_width,
            num_frames=job.num_frames,
            frame_rate=float(job.fps),
            num_inference_steps=job.steps,
            guidance_scale=job.guidance_scale,
            generator=generator,
            output_type="latent",
            callback_on_step_end=step_reporter(on_step),
            **kwargs,
        )
        synchronize(self.device)
        # Decoding continues this generator (decode-time noise), as inside the pipeline: keep its state.
        return LTX2Latents(video=out.frames, audio=out.audio, generator_state=generator.get_state())

    # ------------------------------------------------------------------------------------------ decode

    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        import torch

        if not isinstance(latents, LTX2Latents):
            raise JobError(ErrorCode.internal_error, f"{self.spec.id} cannot decode {type(latents).__name__}")
        pipe = self._pipe()
        generator = torch.Generator(self.device)
        generator.set_state(latents.generator_state)
        # 4. Decode the video.
        video = self._decode_video(latents.video, generator, dict(job.pipeline_kwargs))
        # 5. Decode the audio only when the job wants it.
        audio = self._decode_audio(latents.audio, seconds=job.keep_frames / job.fps) if job.audio else None
        pipe.maybe_free_model_hooks()
        synchronize(self.device)
        return media_from_video(self.spec.id, job, video, audio)

    def _decode_video(self, latents: torch.Tensor, generator: torch.Generator, kwargs: dict[str, Any]) -> torch.Tensor:
        """Denormalised latents -> video (1, 3, F, H, W) in [-1, 1], as LTX2Pipeline decodes them."""
        import torch
        from diffusers.utils.torch_utils import get_module_execution_device, randn_tensor

        pipe = self.pipe
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

    def _decode_audio(self, audio_latents: torch.Tensor, *, seconds: float) -> AudioTrack:
        import torch
        from diffusers.utils.torch_utils import get_module_execution_device

        pipe = self.pipe
        audio_vae = pipe.audio_vae
        audio_latents = audio_latents.to(get_module_execution_device(audio_vae), dtype=audio_vae.dtype)
        with torch.no_grad():
            mel = audio_vae.decode(audio_latents, return_dict=False)[0]
            waveform = pipe.vocoder(mel.to(pipe.vocoder.dtype))
        return fit_audio(waveform, self.sample_rate, seconds)

    # ------------------------------------------------------------------------------------------ prompt

    def extend_prompt(self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int) -> str:
        """Rewrite ``prompt`` with the pipeline's own Gemma-3 text encoder and the T2V system prompt."""
        pipe = self._pipe()
        if getattr(pipe, "processor", None) is None:
            raise PromptExtendError(f"{self.spec.id} has no processor: its text encoder cannot enhance prompts")
        started = time.perf_counter()
        with seeded_rng(seed, self.device):
            texts = pipe.enhance_prompt(
                prompt,
                system_prompt=LTX2_T2V_SYSTEM_PROMPT,
                max_new_tokens=max_new_tokens,
                seed=seed,
                generation_kwargs={**_ENHANCE_SAMPLING, "max_time": timeout_s},
            )
        return finish_extension(texts[0] if texts else "", started=started, timeout_s=timeout_s)

    # ------------------------------------------------------------------------------------------ memory

    def memory_bytes(self) -> int:
        return module_bytes(self.pipe) if self.pipe is not None else 0

    def unload(self) -> None:
        if self.pipe is not None and self.runtime.cpu_offload != "none":
            self.pipe.remove_all_hooks()
        self.pipe = None
        free_device_memory(self.device)

    def _pipe(self) -> Any:
        if self.pipe is None:
            raise JobError(ErrorCode.internal_error, f"{self.spec.id} was unloaded")
        return self.pipe

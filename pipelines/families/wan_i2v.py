"""Wan image-to-video (diffusers ``WanImageToVideoPipeline``): Wan 2.1 I2V 14B, Wan 2.2 I2V A14B and Wan 2.2
TI2V 5B, which also makes text-to-video.

Everything but the call is ``pipelines.families.wan.WanTextToVideo`` (scheduler shift, expert boundary, the constant
negative prompt, decoding, memory); what differs per checkpoint is read from its weights, not the catalog:
- Wan 2.1 I2V: a CLIP image encoder (``image_encoder``/``image_processor``) gives image tokens to the
  transformer's cross-attention (``image_dim``), and the fitted image, VAE-encoded as frame 0 of a
  zero video, is concatenated with a first-frame mask to the noise (36 input channels);
- Wan 2.2 I2V A14B: the same channel concatenation without an image encoder, and two experts switching at
  the boundary ratio (0.9 in the official config, from the variant's ``pipeline_kwargs``);
- Wan 2.2 TI2V 5B (``expand_timesteps``): its own VAE (z_dim 48, 16x spatial, so sizes are multiples of 32);
  the image latent *is* latent frame 0, held at timestep 0 while the other frames denoise. Its
  ``text_to_video`` mode runs ``WanPipeline`` over the same modules (``pipeline_over``: no copy, no cast).
A job of mode ``image_to_video`` must bring its image (``denoise(..., image=)``, RGB, already fitted to the
generation size by the worker); one of mode ``text_to_video`` must not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from foundation.core.errors import ErrorCode, JobError
from pipelines.families.wan import WanLatents, WanTextToVideo
from pipelines.runtime.checks import check_image
from pipelines.runtime.options import FAMILY_OPTIONS
from pipelines.runtime.sibling import pipeline_over

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.core.catalog import ModelSpec
    from foundation.core.media import StepCallback
    from foundation.core.resolve import ResolvedJob
    from pipelines.runtime.previews import Previews
    from pipelines.runtime.resume import Checkpoints

__all__ = ["WanImageToVideo"]


class WanImageToVideo(WanTextToVideo):
    """A loaded Wan image-to-video pipeline. Not thread-safe: one GPU loop calls ``denoise`` and ``decode``."""

    options: ClassVar[frozenset[str]] = FAMILY_OPTIONS["wan"]

    def init_state(self) -> None:
        super().init_state()
        self._text_pipe: Any = None  # WanPipeline over the same modules, built on the first text_to_video job

    @classmethod
    def pipeline_class(cls, spec: ModelSpec) -> Any:
        """``WanImageToVideoPipeline``; the CLIP image encoder, when the checkpoint has one, stays in the profile's
        dtype for it (float32 in diffusers' Wan I2V example), like the VAE. The rest of loading is Wan's."""
        from diffusers import WanImageToVideoPipeline

        return WanImageToVideoPipeline

    def run_denoise(
        self,
        job: ResolvedJob,
        on_step: StepCallback,
        *,
        image: Image | None = None,
        checkpoints: Checkpoints | None = None,
        previews: Previews | None = None,
    ) -> WanLatents:
        pipe = self.loaded_pipe()
        if check_image(self.spec.id, job, image) is None:
            return self._denoise_with(self._text_pipeline(pipe), job, on_step, checkpoints, previews)
        return self._denoise_with(pipe, job, on_step, checkpoints, previews, image=image)

    def _text_pipeline(self, pipe: Any) -> Any:
        """``WanPipeline`` sharing every module (TI2V 5B's text_to_video): only a checkpoint whose transformer
        takes bare latents (``in_channels == z_dim``) can run without an image."""
        if pipe.transformer.config.in_channels != pipe.vae.config.z_dim:
            raise JobError(ErrorCode.pipeline_error, f"{self.spec.id}: its transformer needs an image condition")
        if self._text_pipe is None:
            from diffusers import WanPipeline

            self._text_pipe = pipeline_over(WanPipeline, pipe)
        return self._text_pipe

    def release(self) -> None:
        self._text_pipe = None
        super().release()

"""A job checked against the loaded model before the pipeline runs (``check_inputs`` in diffusers' vocabulary): its
input image, its size and frame count against the family's strides, its ``pipeline_kwargs`` against the family's
options, and its prompt against the text encoder's token limit. Pipelines round sizes and cut prompts silently;
these refuse or report instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from foundation.core.contract import PromptTokens
from foundation.core.errors import ErrorCode, JobError

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.core.resolve import ResolvedJob

__all__ = ["IMAGE_MODE", "check_image", "check_job_shape", "count_prompt_tokens", "pipeline_options"]


# The mode whose jobs bring an input image (``denoise(..., image=)``); every other mode is text-only.
IMAGE_MODE = "image_to_video"


def check_image(model_id: str, job: ResolvedJob, image: Image | None) -> Image | None:
    """The image a job of this mode must have (and only it), at the generation size; else a coded refusal."""
    if job.mode == IMAGE_MODE and image is None:
        raise JobError(ErrorCode.invalid_payload, f"{model_id}: an image_to_video job came without its image")
    if job.mode != IMAGE_MODE and image is not None:
        raise JobError(ErrorCode.invalid_payload, f"{model_id}: a {job.mode} job came with an image")
    if image is not None and image.size != (job.gen_width, job.gen_height):
        raise JobError(
            ErrorCode.pipeline_error,
            f"{model_id}: image is {image.size[0]}x{image.size[1]}, the job generates {job.gen_width}x{job.gen_height}",
        )
    return image


def check_job_shape(model_id: str, job: ResolvedJob, *, spatial: int, temporal: int) -> None:
    """Refuse a job whose size is off the family's ``spatial`` stride or whose frames are not ``temporal``k+1.

    The resolver guarantees both, so a mismatch is a catalog bug; it is refused here because pipelines
    silently round sizes and frame counts instead (and LTX-2 would then size its audio for the wrong length).
    """
    problems = []
    if job.gen_width % spatial or job.gen_height % spatial:
        problems.append(f"size {job.gen_width}x{job.gen_height} is not a multiple of {spatial}")
    if job.num_frames % temporal != 1:
        problems.append(f"{job.num_frames} frames is not {temporal}k+1")
    if problems:
        raise JobError(ErrorCode.invalid_parameter, f"{model_id}: " + "; ".join(problems))


def pipeline_options(model_id: str, job: ResolvedJob, allowed: frozenset[str]) -> dict[str, Any]:
    """A copy of ``job.pipeline_kwargs``, refusing keys the family does not take (the catalog checks them at
    load; a job built another way is checked here rather than failing deep inside the pipeline call)."""
    unknown = sorted(set(job.pipeline_kwargs) - allowed)
    if unknown:
        raise JobError(ErrorCode.pipeline_error, f"{model_id}: pipeline_kwargs {unknown} are not options of its family")
    return dict(job.pipeline_kwargs)


def count_prompt_tokens(tokenizer: Any, prompt: str, limit: int) -> PromptTokens:
    """``prompt`` against the text encoder's ``limit``, tokenized as the pipeline does (special tokens
    included): the pipelines truncate at ``limit`` without a word, so the job's record says so instead."""
    total = len(tokenizer(prompt, add_special_tokens=True).input_ids)
    return PromptTokens(total=total, kept=min(total, limit), limit=limit, truncated=total > limit)

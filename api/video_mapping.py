"""``POST /v1/videos`` translated: the Videos API's create fields (``api/video_requests.py``) mapped onto the
catalog, as the one create request of ``/v1/generations``.

``to_create_request`` refuses a value the model does not offer with a coded 400 that names the field and what
the model offers, never ignored or rounded to something near:

=============================  =============================================================================
field                          becomes
=============================  =============================================================================
``model``                      ``model``: a catalog id (required; ``GET /v1/models`` lists them)
``prompt``                     ``input.prompt``
``input_reference``            the input image: a file part, or ``{"image_url": "https://..."|"data:..."}``
                               (form: ``input_reference[image_url]``); mode ``image_to_video`` where the model
                               has it, ratio ``auto`` (the offered one nearest the image) unless a size is given
``size``, or ``width`` and     the offered (resolution, ratio) whose exact size is ``WxH``: ``1280x720`` is
``height``                     ``720p`` ``16:9``
``seconds``                    ``duration_seconds``, one the model offers
``num_frames``                 the offered duration it counts: seconds x fps (the frames the MP4 holds), or the
                               frames the model generates for it (Wan's 4k+1: 81 for 5 s at 16 fps)
``fps``                        the model's own fps, the only one it makes
``num_inference_steps``,       the variant of the mode whose recipe has these steps and this guidance
``guidance_scale``             (``standard`` when several do, and when neither is given)
``negative_prompt``, ``seed``  ``parameters.negative_prompt``, ``parameters.seed``
=============================  =============================================================================

Refusals of the shared create path name generations' fields (``parameters.duration_seconds``, ``input.image``);
``video_param`` gives the field of this API they came from.
"""

from __future__ import annotations

import math
import re

from api.video_requests import VideoCreate
from foundation.core.catalog import Catalog, ModelSpec
from foundation.core.contract import AUTO_RATIO, CreateRequest, parse_create_request
from foundation.core.errors import ErrorCode, RequestRejected
from foundation.core.resolve import frames_for
from foundation.core.sizes import target_size

__all__ = ["as_video_rejection", "offered_sizes", "to_create_request", "video_param"]

_SIZE = re.compile(r"\s*([0-9]{1,5})\s*[xX]\s*([0-9]{1,5})\s*")


def _reject(code: ErrorCode, message: str, param: str | None) -> RequestRejected:
    return RequestRejected(code, message, param)


def to_create_request(video: VideoCreate, catalog: Catalog, *, uploaded: bool) -> CreateRequest:
    """The generations create request ``video`` stands for (``uploaded``: an image came as a file part), or a
    coded ``RequestRejected`` naming this API's field and what the model offers instead."""
    spec = _model(video, catalog)
    has_image = uploaded or video.input_reference is not None
    mode = _mode(spec, has_image=has_image)
    size = _size(spec, video)
    resolution, ratio = size if size is not None else (None, AUTO_RATIO if has_image else None)
    parameters = {
        "resolution": resolution,
        "ratio": ratio,
        "duration_seconds": _duration(spec, video),
        "seed": video.seed,
        "negative_prompt": video.negative_prompt,
    }
    inputs: dict[str, str] = {"prompt": video.prompt}
    if video.input_reference is not None:
        url = video.input_reference.image_url
        inputs["image" if url[:5].lower() == "data:" else "image_url"] = url
    body = {
        "model": spec.id,
        "mode": mode,
        "variant": _variant(spec, mode, video),
        "parameters": {name: value for name, value in parameters.items() if value is not None},
        "input": inputs,
    }
    try:
        return parse_create_request(body)
    except RequestRejected as e:
        raise as_video_rejection(e) from None


# Generations' fields, as the refusals of the shared create path name them, and the field of this API each
# came from. A field missing here has the same name on both (``model``).
_VIDEO_PARAMS = {
    "input.prompt": "prompt",
    "input.image": "input_reference",
    "input.image_url": "input_reference",
    "parameters.seed": "seed",
    "parameters.negative_prompt": "negative_prompt",
    "parameters.duration_seconds": "seconds",
    "parameters.resolution": "size",
    "parameters.ratio": "size",
    "mode": "input_reference",
    "variant": "num_inference_steps",
}


def video_param(param: str | None) -> str | None:
    """The field of this API that a refusal of the shared create path (which names generations' fields) is about."""
    return None if param is None else _VIDEO_PARAMS.get(param, param)


def as_video_rejection(e: RequestRejected) -> RequestRejected:
    """``e`` naming this API's field, in its param and at the head of its message."""
    param = video_param(e.param)
    message = e.message
    if e.param and param != e.param and message.startswith(f"{e.param}:"):
        message = f"{param}:{message[len(e.param) + 1 :]}"
    return RequestRejected(e.code, message, param)


def _model(video: VideoCreate, catalog: Catalog) -> ModelSpec:
    if video.model is None:
        raise _reject(ErrorCode.invalid_parameter, "model is required: a model id of GET /v1/models", "model")
    spec = catalog.get(video.model)
    if spec is None:
        raise _reject(
            ErrorCode.model_not_found, f"model {video.model!r} is not in the catalog (GET /v1/models)", "model"
        )
    return spec


def _mode(spec: ModelSpec, *, has_image: bool) -> str:
    mode = "image_to_video" if has_image else "text_to_video"
    if mode in spec.modes:
        return mode
    if has_image:
        raise _reject(
            ErrorCode.unsupported_parameter,
            f"{spec.id} takes no input_reference: it has no image_to_video mode",
            "input_reference",
        )
    raise _reject(
        ErrorCode.unsupported_mode, f"{spec.id} makes video from an image only: give input_reference", "input_reference"
    )


def offered_sizes(spec: ModelSpec) -> dict[str, tuple[str, str]]:
    """``"WxH"`` → (resolution, ratio), for every size the model offers, in catalog order."""
    sizes: dict[str, tuple[str, str]] = {}
    for resolution in spec.resolutions:
        for ratio in spec.ratios:
            width, height = target_size(resolution, ratio)
            sizes[f"{width}x{height}"] = (resolution, ratio)
    return sizes


def _size(spec: ModelSpec, video: VideoCreate) -> tuple[str, str] | None:
    """The (resolution, ratio) of ``size`` or of ``width`` and ``height``; None when none is given."""
    text, param = video.size, "size"
    if video.width is not None or video.height is not None:
        if video.width is None or video.height is None:
            missing = "width" if video.width is None else "height"
            raise _reject(ErrorCode.invalid_parameter, "give width and height together", missing)
        given = f"{video.width}x{video.height}"
        if text is not None and _normal_size(text) != given:
            raise _reject(ErrorCode.invalid_parameter, f"size {text!r} and width x height {given} disagree", "size")
        text, param = given, "width"
    if text is None:
        return None
    sizes = offered_sizes(spec)
    found = sizes.get(_normal_size(text) or "")
    if found is None:
        raise _reject(
            ErrorCode.invalid_parameter,
            f"size {text!r} is not offered by {spec.id}; offered sizes: {', '.join(sizes)}",
            param,
        )
    return found


def _normal_size(text: str) -> str | None:
    """``"WxH"`` with the numbers as written (``" 256 X 144"`` is ``256x144``); None when it is no size."""
    match = _SIZE.fullmatch(text)
    return None if match is None else f"{int(match[1])}x{int(match[2])}"


def _duration(spec: ModelSpec, video: VideoCreate) -> int | None:
    """The offered ``duration_seconds`` that ``seconds`` or ``num_frames`` name; None when neither is given."""
    if video.fps is not None and video.fps != spec.fps:
        raise _reject(
            ErrorCode.invalid_parameter, f"fps {video.fps} is not offered by {spec.id}: it makes {spec.fps} fps", "fps"
        )
    if video.num_frames is not None:
        seconds = _seconds_of_frames(spec, video.num_frames)
        if video.seconds is not None and video.seconds != seconds:
            raise _reject(
                ErrorCode.invalid_parameter,
                f"num_frames {video.num_frames} is {seconds} s at {spec.fps} fps, but seconds is {video.seconds}",
                "num_frames",
            )
        return seconds
    if video.seconds is not None and video.seconds not in spec.durations:
        offered = ", ".join(str(d) for d in spec.durations)
        raise _reject(
            ErrorCode.invalid_parameter,
            f"seconds {video.seconds} is not offered by {spec.id}; offered: {offered}",
            "seconds",
        )
    return video.seconds


def _seconds_of_frames(spec: ModelSpec, frames: int) -> int:
    counts = {d: (d * spec.fps, frames_for(d * spec.fps, spec.frame_rule.multiple, spec.frame_rule.offset))
              for d in spec.durations}  # fmt: skip
    for index in (0, 1):  # the frames the MP4 holds first: an exact duration wins over a generated count
        for seconds, pair in counts.items():
            if pair[index] == frames:
                return seconds
    offered = ", ".join(
        (f"{kept}" if kept == made else f"{kept} or {made}") + f" ({d} s)" for d, (kept, made) in counts.items()
    )
    raise _reject(
        ErrorCode.invalid_parameter,
        f"num_frames {frames} is no duration {spec.id} offers at {spec.fps} fps; offered: {offered}",
        "num_frames",
    )


def _variant(spec: ModelSpec, mode: str, video: VideoCreate) -> str:
    """The variant whose recipe has the asked steps and guidance (``standard`` first, else catalog order)."""
    variants = spec.modes[mode].variants
    steps, guidance = video.num_inference_steps, video.guidance_scale
    fitting = [
        name
        for name, variant in variants.items()
        if (steps is None or variant.steps == steps)
        and (guidance is None or math.isclose(variant.guidance_scale, guidance, rel_tol=1e-9, abs_tol=1e-9))
    ]
    if fitting:
        return "standard" if "standard" in fitting else fitting[0]
    param = (
        "num_inference_steps"
        if steps is not None and all(v.steps != steps for v in variants.values())
        else ("guidance_scale")
    )
    asked = " and ".join(
        part
        for part in (
            f"num_inference_steps {steps}" if steps is not None else "",
            f"guidance_scale {guidance:g}" if guidance is not None else "",
        )
        if part
    )
    recipes = "; ".join(
        f"{name}: num_inference_steps {v.steps}, guidance_scale {v.guidance_scale:g}" for name, v in variants.items()
    )
    raise _reject(
        ErrorCode.invalid_parameter, f"{spec.id} has no {mode} recipe with {asked}; its recipes: {recipes}", param
    )

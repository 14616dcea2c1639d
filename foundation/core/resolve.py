"""Parameter resolution: a create request plus the catalog gives a resolved job and a price hold.

Everything a pipeline needs is decided here, once, so the API (at create) and the worker (at claim)
agree: target size from the size table, generation size (``generation_size``), generated frames by the
family's frame rule, frames to keep = duration x fps, and the variant's recipe.

The generation size is the target rounded up to the model's stride, or the size its upstream lists instead
(``generation_sizes``: 1280x704 for a 1280x720 target). An ``image_to_video`` job of a model that keeps the
image's aspect (``image_fit``) generates at the image's aspect with that size's area: the model sees the whole
image, as upstream, and the encoder crops the video to the requested ratio and scales it to the target.
"""

from __future__ import annotations

import difflib
import math
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from foundation.core.catalog import CacheSpec, Catalog, LoraSpec, ModelSpec, SamplerSpec, VariantSpec, mode_inputs
from foundation.core.contract import AUTO_RATIO, MAX_SEED, CreateRequest, Money, Parameters, StoredImage
from foundation.core.errors import ErrorCode, RequestRejected
from foundation.core.sizes import best_output_size, max_area_size, target_size

__all__ = [
    "CHOICES",
    "ImageSize",
    "ResolvedJob",
    "check_inputs",
    "check_prompt",
    "compute_price",
    "frames_for",
    "generation_size",
    "image_cover_size",
    "listed",
    "model_not_found",
    "nearest_ratio",
    "not_offered",
    "resolve",
    "round_up",
]

_CENT = Decimal("0.01")


class ImageSize(Protocol):
    """What ``generation_size`` reads of an input image (a ``StoredImage``, or a size from its header)."""

    @property
    def width(self) -> int: ...

    @property
    def height(self) -> int: ...


@dataclass(frozen=True)
class _ImageSize:
    width: int
    height: int


class ResolvedJob(BaseModel):
    """A request turned into exact pipeline inputs. Crosses the worker/pipelines boundary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    family: str
    adapter: str
    weights: str
    mode: str
    variant: str
    prompt: str
    negative_prompt: str
    prompt_extend: bool
    audio: bool
    seed: int
    resolution: str
    ratio: str
    duration_seconds: int
    width: int  # what the client receives
    height: int
    gen_width: int  # what the pipeline generates (a multiple of the stride; ``generation_size``)
    gen_height: int
    fps: int
    num_frames: int  # generated, obeys the frame rule
    keep_frames: int  # encoded: duration_seconds * fps
    steps: int
    guidance_scale: float
    guidance_scale_2: float | None = None
    flow_shift: float | None = None
    pipeline_kwargs: dict[str, Any] = {}
    cache: CacheSpec | None = None  # the variant's cache recipe (pipelines.runtime.profile.apply_cache)
    lora: LoraSpec | None = None  # the variant's LoRA (pipelines.runtime.profile.apply_lora)
    sampler: SamplerSpec | None = None  # the variant's solver, when not the checkpoint's (pipelines.families.wan)
    max_job_seconds: float
    # The stored input image of an image_to_video job; the worker reads it from the artifact store, checks its
    # sha256, fits it to (gen_width, gen_height) (worker.input_image) and hands it to the adapter.
    image: StoredImage | None = None


def round_up(value: int, stride: int) -> int:
    return math.ceil(value / stride) * stride


def generation_size(spec: ModelSpec, resolution: str, ratio: str, image: ImageSize | None = None) -> tuple[int, int]:
    """(width, height) the pipeline generates: the size upstream lists for this resolution and ratio, else the
    target rounded up to the stride; for an input image under ``image_fit`` max_area or best_output_size, the
    image's aspect with the area of the resolution's 16:9 size, as upstream, whatever ratio was asked."""
    listed = spec.generation_sizes.get(resolution, {}).get(ratio)
    if listed is not None:
        width, height = listed
    else:
        target_w, target_h = target_size(resolution, ratio)
        width, height = round_up(target_w, spec.stride), round_up(target_h, spec.stride)
    if image is None or spec.image_fit == "crop":
        return width, height
    # Upstream's area is its --size's whatever the shape (Wan 2.1/2.2 generate.py: max_area=MAX_AREA_CONFIGS[size],
    # 832*480, 1280*720, TI2V's 1280*704): the resolution's 16:9 size, not the requested ratio's.
    area_w, area_h = generation_size(spec, resolution, "16:9")
    fit = max_area_size if spec.image_fit == "max_area" else best_output_size
    return fit(image.width, image.height, area_w * area_h, spec.stride)


def frames_for(keep: int, multiple: int, offset: int) -> int:
    """Smallest ``multiple * k + offset`` that is >= ``keep`` (and >= offset)."""
    k = max(0, math.ceil((keep - offset) / multiple))
    return multiple * k + offset


def compute_price(spec: ModelSpec, variant: VariantSpec, resolution: str, seconds: Decimal, audio: bool) -> Money:
    """USD for ``seconds`` of output, in cents, with Decimal arithmetic only."""
    rate = spec.rates.per_second[resolution] * variant.rate_multiplier
    if audio:
        rate += spec.rates.audio_per_second
    amount = (rate * seconds).quantize(_CENT, rounding=ROUND_HALF_UP)
    return Money(currency="USD", amount=f"{amount:.2f}")


def _reject(code: ErrorCode, message: str, param: str) -> RequestRejected:
    return RequestRejected(code, message, param)


def _pick(params: Parameters, spec: ModelSpec, name: str) -> Any:
    value = getattr(params, name)
    return spec.defaults.get(name) if value is None else value


def listed(values: Iterable[object]) -> str:
    """Allowed values as every error sentence writes them: ``16:9, 9:16``, never a Python list."""
    return ", ".join(str(value) for value in values)


# The parameters chosen from a model's list, and the list each is chosen from.
CHOICES: dict[str, Callable[[ModelSpec], list[Any]]] = {
    "resolution": lambda spec: spec.resolutions,
    "ratio": lambda spec: spec.ratios,
    "duration_seconds": lambda spec: spec.durations,
}


def not_offered(spec: ModelSpec, name: str, value: object) -> RequestRejected:
    """The one sentence for a choice the model does not offer, whether well-formed (``21:9``) or not
    (``16x9``, ``"5"``): a client needs the allowed values either way, not the pattern that failed."""
    allowed = CHOICES[name](spec)
    # "5" for 5: the body is read strictly, so say why a listed-looking value is refused.
    note = " (numbers, not strings)" if isinstance(value, str) and all(isinstance(a, int) for a in allowed) else ""
    return _reject(
        ErrorCode.invalid_parameter,
        f"{name} {value!r} is not offered by {spec.id}; allowed: {listed(allowed)}{note}",
        f"parameters.{name}",
    )


def _check_choices(spec: ModelSpec, resolution: str, ratio: str, duration: int) -> None:
    for name, value in (("resolution", resolution), ("ratio", ratio), ("duration_seconds", duration)):
        if value not in CHOICES[name](spec):
            raise not_offered(spec, name, value)


def model_not_found(model: str, catalog: Catalog) -> RequestRejected:
    """An unknown model id, with the closest ids (a typo such as ``tiny_wan``) and where the list is."""
    close = difflib.get_close_matches(model, list(catalog.models), n=3, cutoff=0.6)
    hint = f"; did you mean {listed(close)}?" if close else ";"
    return _reject(
        ErrorCode.model_not_found,
        f"model {model!r} is not in the catalog{hint} GET /v1/models lists every model",
        "model",
    )


def _lookup(request: CreateRequest, catalog: Catalog) -> tuple[ModelSpec, VariantSpec]:
    spec = catalog.get(request.model)
    if spec is None:
        raise model_not_found(request.model, catalog)
    mode = spec.modes.get(request.mode)
    if mode is None:
        raise _reject(
            ErrorCode.unsupported_mode,
            f"model {spec.id} has no mode {request.mode!r}; modes: {listed(sorted(spec.modes))}",
            "mode",
        )
    variant = mode.variants.get(request.variant)
    if variant is None:
        raise _reject(
            ErrorCode.unsupported_variant,
            f"mode {request.mode} of {spec.id} has no variant {request.variant!r}; variants: {listed(mode.variants)}",
            "variant",
        )
    return spec, variant


def check_inputs(request: CreateRequest, catalog: Catalog) -> bool:
    """Whether the request brings an image its mode needs (``MODE_INPUTS``); raise a coded
    ``RequestRejected`` for an unknown model, mode or variant, an image its mode does not take, a missing
    one, or both sources at once. The API calls it before fetching anything."""
    _lookup(request, catalog)
    given = [name for name in ("image_url", "image") if getattr(request.input, name) is not None]
    if "image" not in mode_inputs(request.mode):
        if given:
            raise _reject(
                ErrorCode.unsupported_parameter,
                f"mode {request.mode} takes no input image; image_to_video does",
                f"input.{given[0]}",
            )
        return False
    if not given:
        raise _reject(
            ErrorCode.invalid_parameter,
            f"mode {request.mode} needs an input image: input.image_url (https) or input.image (a data: URI)",
            "input.image",
        )
    if len(given) > 1:
        raise _reject(ErrorCode.invalid_parameter, "give input.image_url or input.image, not both", "input.image")
    return True


def check_prompt(spec: ModelSpec, prompt: str) -> None:
    """Reject a prompt longer than ``spec`` accepts (the one check of ``resolve`` that reads the prompt)."""
    if len(prompt) > spec.prompt_max_chars:
        raise _reject(
            ErrorCode.invalid_parameter,
            f"prompt has {len(prompt)} characters; {spec.id} accepts at most {spec.prompt_max_chars}",
            "input.prompt",
        )


def nearest_ratio(offered: list[str], width: int, height: int) -> str:
    """The offered ratio closest to ``width``/``height`` in log scale (so 2:1 is as far from 1:1 as 1:2)."""

    def distance(label: str) -> float:
        w, h = (int(part) for part in label.split(":"))
        return abs(math.log((w / h) / (width / height)))

    return min(offered, key=distance)


def image_cover_size(request: CreateRequest, catalog: Catalog, image_width: int, image_height: int) -> tuple[int, int]:
    """The generation size an input image of ``image_width`` x ``image_height`` (upright) is fitted to for
    this request, as ``resolve`` will find it: what the API's decode of the image must still cover. A coded
    ``RequestRejected`` for a choice the model does not offer, as ``resolve``."""
    spec, _variant = _lookup(request, catalog)
    params = request.parameters
    resolution: str = _pick(params, spec, "resolution")
    ratio: str = _pick(params, spec, "ratio")
    if ratio == AUTO_RATIO:
        ratio = nearest_ratio(spec.ratios, image_width, image_height)
    _check_choices(spec, resolution, ratio, _pick(params, spec, "duration_seconds"))
    return generation_size(spec, resolution, ratio, _ImageSize(image_width, image_height))


def resolve(request: CreateRequest, catalog: Catalog, *, image: StoredImage | None = None) -> tuple[ResolvedJob, Money]:
    """Resolve a validated request against the catalog, or raise a coded ``RequestRejected``.

    ``image`` is the checked input image of an ``image_to_video`` request (the API passes it at create;
    the record then stores the ratio ``auto`` resolved to, so later resolutions need no image)."""
    spec, variant = _lookup(request, catalog)
    params = request.parameters
    resolution: str = _pick(params, spec, "resolution")
    ratio: str = _pick(params, spec, "ratio")
    if ratio == AUTO_RATIO:
        if image is None:
            raise _reject(ErrorCode.invalid_parameter, "ratio 'auto' needs an input image", "parameters.ratio")
        ratio = nearest_ratio(spec.ratios, image.width, image.height)
    duration: int = _pick(params, spec, "duration_seconds")
    audio = bool(_pick(params, spec, "audio") or False)
    prompt_extend = bool(_pick(params, spec, "prompt_extend") or False)
    _check_choices(spec, resolution, ratio, duration)
    if audio and not spec.audio:
        raise _reject(ErrorCode.unsupported_parameter, f"{spec.id} does not generate audio", "parameters.audio")
    if prompt_extend and spec.prompt_extend is None:
        raise _reject(
            ErrorCode.unsupported_parameter, f"{spec.id} does not support prompt_extend", "parameters.prompt_extend"
        )
    prompt = request.input.prompt
    check_prompt(spec, prompt)
    width, height = target_size(resolution, ratio)
    gen_width, gen_height = generation_size(spec, resolution, ratio, image)
    keep = duration * spec.fps
    job = ResolvedJob(
        model=spec.id,
        family=spec.family,
        adapter=spec.adapter,
        weights=spec.weights,
        mode=request.mode,
        variant=request.variant,
        prompt=prompt,
        negative_prompt=params.negative_prompt if params.negative_prompt is not None else spec.negative_prompt,
        prompt_extend=prompt_extend,
        audio=audio,
        seed=params.seed if params.seed is not None else secrets.randbelow(MAX_SEED + 1),
        resolution=resolution,
        ratio=ratio,
        duration_seconds=duration,
        width=width,
        height=height,
        gen_width=gen_width,
        gen_height=gen_height,
        fps=spec.fps,
        num_frames=frames_for(keep, spec.frame_rule.multiple, spec.frame_rule.offset),
        keep_frames=keep,
        steps=variant.steps,
        guidance_scale=variant.guidance_scale,
        guidance_scale_2=variant.guidance_scale_2,
        flow_shift=variant.flow_shift,
        pipeline_kwargs=dict(variant.pipeline_kwargs),
        cache=variant.cache,
        lora=variant.lora,
        sampler=variant.sampler,
        max_job_seconds=spec.max_job_seconds,
        image=image,
    )
    hold = compute_price(spec, variant, resolution, Decimal(duration), audio)
    return job, hold

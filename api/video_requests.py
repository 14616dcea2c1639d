"""``POST /v1/videos`` read: the Videos API's create request as it arrives, its fields validated.

The create (the openai SDK's ``videos.create``, with vLLM-Omni's extra form fields) arrives as
``multipart/form-data`` (what the SDK sends; the image as the file part ``input_reference``),
``application/x-www-form-urlencoded`` or ``application/json``. ``read_video_create`` reads it, refusing a body of
another type, malformed JSON, a field given twice, a file where text belongs (or text where the image belongs);
``parse_video_fields`` checks each field's type and bounds (form fields are text: whole numbers and decimals are
read from it). A field this API does not know is ``unsupported_parameter``, never ignored. What the values mean
for a model is ``api/video_mapping.py``'s.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request

from foundation.core.contract import MAX_SEED
from foundation.core.errors import ErrorCode, RequestRejected

__all__ = ["ImageReference", "VideoCreate", "VideoUpload", "parse_video_fields", "read_video_create"]

_FORM_TYPES = frozenset({"multipart/form-data", "application/x-www-form-urlencoded"})
_MAX_FIELDS = 32  # every field this API knows, with room for a client's misspelt ones to be named in the 400
_DECIMAL = re.compile(r"\s*[0-9]{1,6}(?:\.[0-9]{1,9})?\s*")


def _reject(code: ErrorCode, message: str, param: str | None) -> RequestRejected:
    return RequestRejected(code, message, param)


def _integer(value: object) -> object:
    """A whole number as JSON sends it, or as text: form fields are text, and the SDK sends ``seconds: "4"``.
    Anything else goes on to strict validation, which refuses it (a bool, a fraction, other text)."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return value


def _decimal(value: object) -> object:
    """A number as JSON sends it, or as plain decimal text (no exponent, no ``nan`` or ``inf``)."""
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# Whole numbers, each bounded far beyond any model so absurd values stop here.
_Seconds = Annotated[int, BeforeValidator(_integer), Field(ge=1, le=3600)]
_Pixels = Annotated[int, BeforeValidator(_integer), Field(ge=1, le=100_000)]
_Count = Annotated[int, BeforeValidator(_integer), Field(ge=1, le=1_000_000)]


class ImageReference(BaseModel):
    """``input_reference`` given by URL: an https URL the API fetches, or a ``data:`` URI."""

    model_config = ConfigDict(extra="forbid", strict=True)

    image_url: Annotated[str, Field(min_length=1, max_length=200_000_000)]


class VideoCreate(BaseModel):
    """The create's fields, validated (types and bounds); what they mean for a model is ``to_create_request``'s."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str
    model: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    seconds: _Seconds | None = None
    size: Annotated[str, Field(max_length=32)] | None = None
    input_reference: ImageReference | None = None
    width: _Pixels | None = None
    height: _Pixels | None = None
    num_frames: _Count | None = None
    fps: _Count | None = None
    num_inference_steps: _Count | None = None
    guidance_scale: Annotated[float, BeforeValidator(_decimal), Field(ge=0, le=1000, allow_inf_nan=False)] | None = None
    negative_prompt: Annotated[str, Field(max_length=10_000)] | None = None
    seed: Annotated[int, BeforeValidator(_integer), Field(ge=0, le=MAX_SEED)] | None = None


class VideoUpload(BaseModel):
    """A create as read: its fields and the bytes of an uploaded ``input_reference`` (None: no file part)."""

    fields: VideoCreate
    image: bytes | None = None


async def read_video_create(request: Request, *, max_image_bytes: int) -> VideoUpload:
    """The request's fields, validated; a coded ``RequestRejected`` for a body of another type, malformed
    JSON, a field given twice, a file where text belongs (or text where the image belongs), a bad value."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type == "application/json":
        fields, image = _json_fields(await request.body()), None
    elif media_type in _FORM_TYPES:
        # A malformed body, more than one file or too many fields: Starlette's 400, answered with our codes.
        async with request.form(max_files=1, max_fields=_MAX_FIELDS) as form:
            fields, image = await _form_fields(form, max_image_bytes)
    else:
        raise _reject(
            ErrorCode.invalid_request,
            "send the create as multipart/form-data (as the openai SDK does), "
            "application/x-www-form-urlencoded or application/json",
            "Content-Type",
        )
    if image is not None and "input_reference" in fields:
        raise _reject(
            ErrorCode.invalid_parameter, "give input_reference as a file or by URL, not both", "input_reference"
        )
    return VideoUpload(fields=parse_video_fields(fields), image=image)


def _json_fields(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # ValueError covers JSONDecodeError and bad UTF-8
        raise _reject(ErrorCode.invalid_request, "request body is not valid JSON", None) from None
    if not isinstance(data, dict):
        raise _reject(ErrorCode.invalid_request, "request body must be a JSON object", None)
    return data


async def _form_fields(form: FormData, max_image_bytes: int) -> tuple[dict[str, Any], bytes | None]:
    fields: dict[str, Any] = {}
    image: bytes | None = None
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name != "input_reference":
                raise _reject(ErrorCode.invalid_parameter, f"field {name!r} must be text, not a file", name)
            image = await value.read(max_image_bytes + 1)  # one byte more shows an image over the limit
            if len(image) > max_image_bytes:
                raise _reject(
                    ErrorCode.image_too_large, f"the image is larger than {max_image_bytes} bytes", "input_reference"
                )
            continue
        if name == "input_reference":
            raise _reject(
                ErrorCode.invalid_parameter,
                "input_reference must be an image file (a file part), or give input_reference[image_url]",
                name,
            )
        # The SDK's {"image_url": ...} form of input_reference, as its multipart encoding spells it.
        if name.startswith("input_reference[") and name.endswith("]"):
            nested = name[len("input_reference[") : -1]
            reference: dict[str, Any] = fields.setdefault("input_reference", {})
            if nested in reference:
                raise _reject(ErrorCode.invalid_parameter, f"field {name!r} is given more than once", name)
            reference[nested] = value
            continue
        if name in fields:
            raise _reject(ErrorCode.invalid_parameter, f"field {name!r} is given more than once", name)
        fields[name] = value
    return fields, image


_KNOWN = ", ".join(VideoCreate.model_fields)


def parse_video_fields(fields: dict[str, Any]) -> VideoCreate:
    """``fields`` (a decoded JSON object, or form fields as text) validated; a coded ``RequestRejected`` else."""
    try:
        return VideoCreate.model_validate(fields)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        # An unknown field first: {"file_id": ...} is refused for file_id, not for the image_url it lacks.
        first = next((err for err in errors if err["type"] == "extra_forbidden"), errors[0])
        param = ".".join(str(p) for p in first["loc"]) or None
        if first["type"] == "extra_forbidden":
            known = (
                "image_url (an https URL or a data: URI), or upload the image as a file part"
                if (param or "").startswith("input_reference.")
                else _KNOWN
            )
            raise _reject(
                ErrorCode.unsupported_parameter, f"field {param!r} is not supported here; fields: {known}", param
            ) from None
        if first["type"] == "missing":
            raise _reject(ErrorCode.invalid_parameter, f"field {param!r} is required", param) from None
        raise _reject(ErrorCode.invalid_parameter, f"{param}: {first['msg']}", param) from None

"""Reading a create body against the catalog: the defaults a client may leave out, and the sentences a
newcomer meets first.

``parse_create_request`` checks a body's shape alone. The API knows the catalog, so it reads a body here:

- an unknown model is answered first, with the closest ids and ``GET /v1/models``;
- ``mode`` left out takes the model's only mode, or, where it has several, the one the input implies
  (``image_to_video`` with an image, else ``text_to_video``), as the client and the CLI choose it;
- ``variant`` left out takes ``standard`` where the mode has it, else the mode's only variant;
- every missing field is named in one answer (``contract.rejection``);
- a malformed choice (``ratio: "16x9"``, ``duration_seconds: "5"``) gets the sentence of a choice the model
  does not offer, with the allowed values, not the pattern or type that failed.

Filling the defaults before validation keeps ``CreateRequest`` whole (records and the worker read every
field), and a body without ``mode`` hashes as the same body with its default: a replay, not a conflict.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from foundation.core.catalog import Catalog, ModelSpec
from foundation.core.contract import CreateRequest, parse_create_request, rejection
from foundation.core.errors import RequestRejected
from foundation.core.resolve import CHOICES, model_not_found, not_offered

__all__ = ["default_mode", "default_variant", "read_create_request"]

STANDARD_VARIANT = "standard"


def default_mode(spec: ModelSpec, input_: object) -> str | None:
    """The model's only mode, else the one the input implies; None when neither decides."""
    if len(spec.modes) == 1:
        return next(iter(spec.modes))
    given = input_ if isinstance(input_, dict) else {}
    implied = "image_to_video" if given.get("image") or given.get("image_url") else "text_to_video"
    return implied if implied in spec.modes else None


def default_variant(spec: ModelSpec, mode: object) -> str | None:
    """``standard`` where the mode offers it, else the mode's only variant; None when neither decides."""
    if not isinstance(mode, str) or mode not in spec.modes:
        return None
    variants = spec.modes[mode].variants
    if STANDARD_VARIANT in variants:
        return STANDARD_VARIANT
    return next(iter(variants)) if len(variants) == 1 else None


def _with_defaults(data: dict[str, Any], spec: ModelSpec) -> dict[str, Any]:
    filled = dict(data)
    if filled.get("mode") is None:
        mode = default_mode(spec, filled.get("input"))
        if mode is not None:
            filled["mode"] = mode
    if filled.get("variant") is None:
        variant = default_variant(spec, filled.get("mode"))
        if variant is not None:
            filled["variant"] = variant
    return filled


def _choice_refusal(error: ValidationError, spec: ModelSpec) -> RequestRejected | None:
    """``not_offered`` for a first error on a choice parameter, unless a field is missing (those come first)."""
    errors = error.errors(include_url=False)
    if any(e["type"] == "missing" for e in errors):
        return None
    loc = errors[0]["loc"]
    if len(loc) == 2 and loc[0] == "parameters" and loc[1] in CHOICES:
        return not_offered(spec, str(loc[1]), errors[0]["input"])
    return None


def read_create_request(data: object, catalog: Catalog) -> CreateRequest:
    """A decoded JSON create body as a ``CreateRequest`` with the catalog's defaults filled in; a coded
    ``RequestRejected`` otherwise (module docstring)."""
    if not isinstance(data, dict):
        return parse_create_request(data)  # its invalid_request
    model = data.get("model")
    spec = catalog.get(model) if isinstance(model, str) else None
    if isinstance(model, str) and model and spec is None:
        raise model_not_found(model, catalog)
    if spec is None:
        return parse_create_request(data)
    try:
        return CreateRequest.model_validate(_with_defaults(data, spec))
    except ValidationError as e:
        raise (_choice_refusal(e, spec) or rejection(e)) from None

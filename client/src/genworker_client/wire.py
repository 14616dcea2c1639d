"""The HTTP shapes both clients share: request bodies, headers, and turning responses into models or
``ApiError``. No I/O here, so ``Client`` and ``AsyncClient`` differ only in how they send and sleep.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from pydantic import ValidationError

from genworker_client.errors import ApiError
from genworker_client.models import Generation, GenerationPage, Model
from genworker_client.retry import parse_retry_after

__all__ = [
    "DEFAULT_BASE_URL",
    "IDEMPOTENCY_HEADER",
    "REPLAYED_HEADER",
    "RETRYABLE_TRANSPORT_ERRORS",
    "api_headers",
    "as_replay",
    "create_body",
    "error_from_response",
    "generation_from_response",
    "models_from_response",
    "normalize_base_url",
    "page_from_response",
    "resolve_api_key",
    "resolve_base_url",
]

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

# Errors where the request may or may not have reached the server. Retrying is safe only because
# every request this client makes is idempotent (GETs, keyed creates, cancels).
RETRYABLE_TRANSPORT_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


def normalize_base_url(url: str) -> str:
    """The versioned base: ``http://host:8000`` becomes ``http://host:8000/v1``; a path is kept as given."""
    url = url.rstrip("/")
    if httpx.URL(url).path in ("", "/"):
        url += "/v1"
    return url


def resolve_base_url(base_url: str | None) -> str:
    return normalize_base_url(base_url or os.environ.get("GENWORKER_BASE_URL") or DEFAULT_BASE_URL)


def resolve_api_key(api_key: str | None) -> str | None:
    return api_key or os.environ.get("GENWORKER_API_KEY") or None


def api_headers(api_key: str | None, idempotency_key: str | None = None) -> dict[str, str]:
    """Headers for a call to the API. Download URLs never get these: a signed URL carries its own
    authorization, and the API key must not travel to a storage host."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if idempotency_key is not None:
        headers[IDEMPOTENCY_HEADER] = idempotency_key
    return headers


def create_body(
    model: str,
    prompt: str,
    *,
    mode: str,
    variant: str,
    resolution: str | None = None,
    duration_seconds: int | None = None,
    ratio: str | None = None,
    audio: bool | None = None,
    prompt_extend: bool | None = None,
    seed: int | None = None,
    negative_prompt: str | None = None,
    image: dict[str, str] | None = None,
    webhook_url: str | None = None,
    webhook_events: list[str] | None = None,
) -> dict[str, Any]:
    """``POST /v1/generations`` body. Parameters left ``None`` are omitted: the catalog's defaults apply.
    ``image``: the input image fields (``genworker_client.images.image_input``). ``webhook_url``: the
    generation's own webhook, ``webhook_events`` the event types it gets (default: all)."""
    given = {
        "resolution": resolution,
        "duration_seconds": duration_seconds,
        "ratio": ratio,
        "audio": audio,
        "prompt_extend": prompt_extend,
        "seed": seed,
        "negative_prompt": negative_prompt,
    }
    body: dict[str, Any] = {
        "model": model,
        "mode": mode,
        "variant": variant,
        "parameters": {k: v for k, v in given.items() if v is not None},
        "input": {"prompt": prompt, **(image or {})},
    }
    if webhook_url is not None:
        body["webhook_url"] = webhook_url
    if webhook_events is not None:
        body["webhook_events"] = webhook_events
    return body


def error_from_response(response: httpx.Response) -> ApiError:
    """``ApiError`` from an error answer (the body must have been read)."""
    retry_after_s = parse_retry_after(response.headers.get("Retry-After"))
    code, message, param = f"http_{response.status_code}", response.text[:500], None
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        error = payload["error"]
        code = str(error.get("code") or code)
        message = str(error.get("message") or "")
        param = error.get("param") if isinstance(error.get("param"), str) else None
    return ApiError(response.status_code, code, message, param, retry_after_s=retry_after_s)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as e:
        raise ApiError(response.status_code, "invalid_response", f"response is not JSON: {e}") from None


def generation_from_response(response: httpx.Response, *, idempotency_key: str | None = None) -> Generation:
    """The record, with the response's ``Retry-After`` and (for a create) its key and replay flag."""
    try:
        generation = Generation.model_validate(_json(response))
    except ValidationError as e:
        raise ApiError(response.status_code, "invalid_response", f"not a generation record: {e}") from None
    generation._retry_after_s = parse_retry_after(response.headers.get("Retry-After"))
    generation._idempotency_key = idempotency_key
    generation._replayed = response.headers.get(REPLAYED_HEADER, "").lower() == "true"
    return generation


def as_replay(generation: Generation, idempotency_key: str) -> Generation:
    """Mark a record read back for an already-created logical generation as a create's replay."""
    generation._idempotency_key = idempotency_key
    generation._replayed = True
    return generation


def page_from_response(response: httpx.Response) -> GenerationPage:
    try:
        return GenerationPage.model_validate(_json(response))
    except ValidationError as e:
        raise ApiError(response.status_code, "invalid_response", f"not a page of generations: {e}") from None


def models_from_response(response: httpx.Response) -> list[Model]:
    """The catalog as a list, whether the server wraps it (``{"data": [...]}``) or not."""
    payload = _json(response)
    items = payload.get("data") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        raise ApiError(response.status_code, "invalid_response", "catalog response holds no list of models")
    try:
        return [Model.model_validate(item) for item in items]
    except ValidationError as e:
        raise ApiError(response.status_code, "invalid_response", f"not a catalog model: {e}") from None

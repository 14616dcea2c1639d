"""HTTP error answers: one body shape, ``{"error": {"code", "message", "param"}}``, for every failure.

``api.errors.ApiError`` is what route code raises. The handlers installed by ``install_error_handlers`` also turn
FastAPI's own failures into that shape: request validation (FastAPI's 422) becomes 400, Starlette's
404/405 get codes, backend trouble becomes 503, and anything else a generic 500 whose details stay in
the server log. A stack trace never reaches a client.

Backend trouble arrives already translated: the queue, the stores, the key store and the rate limiter
raise ``BackendUnavailable`` (a ``TransientError``) in place of their client library's errors, so this
module decides on our own types and never imports redis, sqlite3 or botocore.

``_STATUS_CODES`` is the one table from an HTTP status to its ``ErrorCode``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.errors import ApiError
from foundation.core.errors import ErrorCode, RequestRejected, TransientError

__all__ = [
    "ERROR_RESPONSES",
    "ErrorBody",
    "ErrorDetail",
    "error_answer",
    "error_response",
    "install_error_handlers",
    "responses_for",
]

log = logging.getLogger("genworker.api")


class ErrorDetail(BaseModel):
    code: ErrorCode = Field(description="Stable machine-readable code.")
    message: str = Field(description="Human-readable explanation; may change between releases.")
    param: str | None = Field(default=None, description="The offending field path or header, when one is to blame.")


class ErrorBody(BaseModel):
    """Every non-2xx response has this body."""

    error: ErrorDetail


def error_response(
    status: int, code: ErrorCode, message: str, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, param=param))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


_DESCRIPTIONS: dict[int, str] = {
    400: "Malformed body, invalid parameter or invalid header (`param` names it).",
    401: "Missing, invalid or revoked API key.",
    403: "The key lacks the scope this operation needs.",
    404: "No such generation for this key's project.",
    409: "Idempotency conflict, or the generation is no longer cancelable.",
    410: "The generation's record is unreadable to every version of the service: it will not run.",
    413: "Request body larger than the configured limit.",
    429: "Rate limit exceeded for this key; see `Retry-After`.",
    500: "Unexpected server error (details are logged, never returned).",
    503: (
        "The queue or the artifact store is unreachable, or (`version_unavailable`) the generation was written by a "
        "newer version of the service during an upgrade; retry with backoff."
    ),
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in _DESCRIPTIONS.items()
}


def responses_for(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these error statuses plus the ones any route can return."""
    wanted = {400, 500, 503, *statuses}
    return {s: ERROR_RESPONSES[s] for s in sorted(wanted)}


# "A backend cannot answer now" (503), not "the server is broken" (500). The builtin socket errors
# stay for one that escaped a client's own wrapping.
_UNAVAILABLE: tuple[type[Exception], ...] = (TransientError, ConnectionError, TimeoutError)
UNAVAILABLE_RETRY_AFTER_S = 2  # the Retry-After of a 503 for a backend that did not answer


_STATUS_CODES: dict[int, ErrorCode] = {
    400: ErrorCode.invalid_request,
    401: ErrorCode.unauthenticated,
    403: ErrorCode.insufficient_scope,
    404: ErrorCode.not_found,
    405: ErrorCode.method_not_allowed,
    413: ErrorCode.payload_too_large,
    429: ErrorCode.rate_limited,
    503: ErrorCode.service_unavailable,
}


def _validation_param(loc: tuple[int | str, ...]) -> str | None:
    # FastAPI prefixes the source ("query", "path", "header", "body"); the param is the rest.
    if loc and loc[0] in {"query", "path", "header", "body"}:
        loc = loc[1:]
    return ".".join(str(p) for p in loc) or None


async def _on_api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.param, exc.headers)


async def _on_rejected(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestRejected)
    return error_response(400, exc.code, exc.message, exc.param)


async def _on_validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = tuple(first.get("loc", ()))
    param = _validation_param(loc)
    # A bad header is a malformed request; a bad query or path value an invalid parameter.
    code = ErrorCode.invalid_request if loc[:1] == ("header",) else ErrorCode.invalid_parameter
    return error_response(400, code, f"{param or 'request'}: {first['msg']}", param)


async def _on_http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _STATUS_CODES.get(exc.status_code, ErrorCode.internal_error)
    message = "no such route" if exc.status_code == 404 else str(exc.detail)
    return error_response(exc.status_code, code, message, None, dict(exc.headers or {}))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, _UNAVAILABLE):
        log.warning("backend unavailable on %s %s: %r", request.method, request.url.path, exc)
        return error_response(
            503,
            ErrorCode.service_unavailable,
            "a backend is temporarily unavailable; retry later",
            None,
            {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)},  # a failover or restart: seconds, not minutes
        )
    # Starlette re-raises after this response, so the server logs the traceback once.
    log.error("unhandled error on %s %s: %r", request.method, request.url.path, exc)
    return error_response(500, ErrorCode.internal_error, "internal error", None)


# The handler of each exception type, looked up along the raised type's MRO as Starlette does.
# ``Exception`` is the last resort: Starlette answers it outermost (500) and re-raises it.
_HANDLERS: dict[type[Exception], Callable[[Request, Exception], Awaitable[JSONResponse]]] = {
    ApiError: _on_api_error,
    RequestRejected: _on_rejected,
    RequestValidationError: _on_validation,
    StarletteHTTPException: _on_http,
    **dict.fromkeys(_UNAVAILABLE, _on_unexpected),
    Exception: _on_unexpected,
}


def install_error_handlers(app: FastAPI) -> None:
    for exc_type, handler in _HANDLERS.items():
        app.add_exception_handler(exc_type, handler)


async def error_answer(request: Request, exc: Exception) -> tuple[JSONResponse, bool]:
    """What the installed handlers answer to ``exc`` raised by a route, for a path that runs outside
    the framework (``api/fast_path.py``): the response, and whether the exception must still be
    re-raised (an unexpected one: answered 500 outermost, then left to the server to log)."""
    for cls in type(exc).__mro__:
        handler = _HANDLERS.get(cls)
        if handler is not None:
            return await handler(request, exc), cls is Exception
    raise exc  # a BaseException that is no Exception: nothing handles it

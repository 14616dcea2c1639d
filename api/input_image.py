"""The input image of an ``image_to_video`` create: read it once, check it, store the checked copy.

At create, before anything is enqueued: the bytes come from ``input.image`` (a ``data:`` URI) or
``input.image_url`` (fetched through the outbound guard, ``api.outbound``); ``foundation.core.images.check_image``
sniffs, bounds, decodes and orients them (the rules and what is kept are described there). The checked copy
is stored in the artifact store under the generation's prefix (``input_image_key``); workers read only it
(``StoredImage``), so GPU nodes need no internet and a retry never refetches.

Every refusal is a ``RequestRejected`` with the image's own codes: ``invalid_image``, ``image_too_large``,
``image_fetch_failed``, ``image_url_not_allowed``.

Bounded per API process (``ImageSlots``), fairly between projects: at most ``api.inputs.max_concurrent_images``
images are decoded at once, each holding at most ``max_image_bytes`` of bytes and one decode under the pixel
cap, and as many ``image_url`` fetches run at once, of which one project may hold only its share (half,
at least one). A fetch holds no decode slot and a ``data:`` image no fetch slot: a project whose creates
fetch from a host that drips a byte a second holds its share of the fetch slots for the fetch time
limit, and another project's images (``data:`` or fetched) still find their slots. A create that finds its
slot taken waits up to ``api.inputs.image_wait_s`` for one, then is answered 503 ``service_unavailable``
with ``Retry-After``. So a burst of large images costs the process a bounded amount of memory and CPU,
whoever sends it, instead of one decode per request at once.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import anyio

from api.errors import ApiError, FetchFailed, FetchTooLarge, UrlNotAllowed
from api.outbound import OutboundPolicy, fetch
from foundation.core.contract import InputSpec, StoredImage
from foundation.core.errors import ErrorCode, RequestRejected
from foundation.core.images import CheckedImage
from foundation.settings import InputSettings
from foundation.stores.base import ArtifactStore, artifact_prefix

__all__ = [
    "ImageSlots",
    "input_image_key",
    "outbound_policy",
    "read_image_source",
    "store_image",
    "stored_image",
]

T = TypeVar("T")

_DATA_URI = re.compile(r"data:image/(?:jpeg|png|webp);base64,(?P<data>.*)", re.DOTALL | re.IGNORECASE)


def _reject(code: ErrorCode, message: str, param: str) -> RequestRejected:
    return RequestRejected(code, message, param)


class ImageSlots:
    """The API process's bounds on input images decoded and fetched at once (module docstring)."""

    def __init__(self, settings: InputSettings) -> None:
        self.limit = settings.max_concurrent_images
        self.per_project = max(1, self.limit // 2)  # a project's share of the fetches: never all of them
        self.wait_s = settings.image_wait_s
        self.settings = settings
        self._slots = anyio.CapacityLimiter(self.limit)  # decodes
        self._fetches = anyio.CapacityLimiter(self.limit)
        self._shares: dict[str, anyio.CapacityLimiter] = {}  # projects with a fetch in flight or waiting

    def _busy(self, what: str) -> ApiError:
        return ApiError(
            503,
            ErrorCode.service_unavailable,
            f"this API process is already {what}; retry shortly",
            None,
            {"Retry-After": str(max(1, math.ceil(self.wait_s)))},
        )

    async def _take_decode_slot(self) -> None:
        """A decode slot, taken by this task (``self._slots.release()`` gives it back); 503 when none frees
        within ``wait_s``."""
        with anyio.move_on_after(self.wait_s) as waited:
            await self._slots.acquire()
        if waited.cancelled_caught:
            raise self._busy(f"checking {self.limit} input images")

    async def run(self, prepare: Callable[[], T]) -> T:
        """``prepare`` (blocking: a decode) on a worker thread once a decode slot is free; 503 when none
        frees within ``wait_s``. The slot is held until the thread is done, even if the client left."""
        await self._take_decode_slot()
        try:
            return await anyio.to_thread.run_sync(prepare)
        finally:
            self._slots.release()

    async def prepare(self, spec: InputSpec, project: str, check: Callable[[bytes, str], T]) -> T:
        """The request's image read (``read_image_source``) and checked (``check(data, param)``), off the event
        loop: an ``image_url`` fetched in one of the project's fetch slots, a ``data:`` image decoded from
        base64 with none, then checked in a decode slot. A fetched image keeps its fetch slot until it has
        a decode slot, so the bytes held at once stay bounded by the slots."""
        if spec.image is not None:
            data, param = await anyio.to_thread.run_sync(read_image_source, spec, self.settings)
            return await self.run(functools.partial(check, data, param))
        async with self._fetch_slot(project):
            data, param = await anyio.to_thread.run_sync(read_image_source, spec, self.settings)
            await self._take_decode_slot()
        try:
            return await anyio.to_thread.run_sync(check, data, param)
        finally:
            self._slots.release()

    @asynccontextmanager
    async def _fetch_slot(self, project: str) -> AsyncIterator[None]:
        """One of the fetch slots within the project's share; 503 when none frees within ``wait_s``."""
        share = self._shares.get(project)
        if share is None:
            share = self._shares[project] = anyio.CapacityLimiter(self.per_project)
        got_share = got_fetch = False
        try:
            with anyio.move_on_after(self.wait_s):
                await share.acquire()
                got_share = True
                await self._fetches.acquire()
                got_fetch = True
            if not got_fetch:
                raise self._busy(f"fetching {self.per_project} image_url inputs of this project")
            yield
        finally:
            if got_fetch:
                self._fetches.release()
            if got_share:
                share.release()
            stats = share.statistics()
            if not stats.borrowed_tokens and not stats.tasks_waiting:  # forget idle projects
                self._shares.pop(project, None)


def outbound_policy(settings: InputSettings) -> OutboundPolicy:
    return OutboundPolicy(
        allow_http_hosts=frozenset(h.lower() for h in settings.allow_http_hosts),
        allow_private_hosts=frozenset(h.lower() for h in settings.allow_private_hosts),
        timeout_s=settings.fetch_timeout_s,
        max_bytes=settings.max_image_bytes,
        max_redirects=settings.max_redirects,
    )


def read_image_source(spec: InputSpec, settings: InputSettings) -> tuple[bytes, str]:
    """The raw bytes of the request's image and the field they came from (``input.image`` or
    ``input.image_url``). Call only when the request has exactly one of them (``check_inputs``)."""
    if spec.image is not None:
        return _decode_data_uri(spec.image, settings.max_image_bytes), "input.image"
    assert spec.image_url is not None
    param = "input.image_url"
    try:
        fetched = fetch(spec.image_url, outbound_policy(settings))
    except UrlNotAllowed as e:
        raise _reject(ErrorCode.image_url_not_allowed, f"image_url refused: {e}", param) from None
    except FetchTooLarge:
        raise _reject(
            ErrorCode.image_too_large, f"the image is larger than {settings.max_image_bytes} bytes", param
        ) from None
    except FetchFailed as e:
        raise _reject(ErrorCode.image_fetch_failed, f"image_url could not be fetched: {e}", param) from None
    return fetched.body, param


def _decode_data_uri(uri: str, max_bytes: int) -> bytes:
    param = "input.image"
    match = _DATA_URI.fullmatch(uri.strip())
    if match is None:
        raise _reject(
            ErrorCode.invalid_image, "image must be a data URI: data:image/jpeg|png|webp;base64,<data>", param
        )
    encoded = re.sub(r"\s+", "", match["data"])
    if len(encoded) // 4 * 3 > max_bytes + 3:  # refuse before decoding a huge string
        raise _reject(ErrorCode.image_too_large, f"the image is larger than {max_bytes} bytes", param)
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _reject(ErrorCode.invalid_image, "the data URI's base64 is not valid", param) from None
    if len(data) > max_bytes:
        raise _reject(ErrorCode.image_too_large, f"the image is larger than {max_bytes} bytes", param)
    return data


def input_image_key(generation_id: str, extension: str) -> str:
    """``generations/<id>/input/image.<ext>``: under the generation's prefix, beside no attempt's objects."""
    return f"{artifact_prefix(generation_id)}input/image.{extension}"


def stored_image(checked: CheckedImage, generation_id: str) -> StoredImage:
    """The record's description of the stored copy (before it is stored: the key is fixed by the id)."""
    return StoredImage(
        key=input_image_key(generation_id, checked.extension),
        content_type=checked.content_type,
        bytes=len(checked.data),
        sha256=checked.sha256,
        width=checked.width,
        height=checked.height,
    )


def store_image(store: ArtifactStore, image: StoredImage, data: bytes) -> None:
    """Put the checked bytes under ``image.key``; the store verifies their sha256 on the way in."""
    with tempfile.TemporaryDirectory(prefix="genworker-input-") as tmp:
        path = Path(tmp) / "image"
        path.write_bytes(data)
        store.put_file(image.key, path, content_type=image.content_type, sha256=image.sha256)

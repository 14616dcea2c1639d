"""An input image for ``image_to_video``, as the create body carries it.

A URL (``https://...``, or ``http://`` to a host the service allows) is sent as ``input.image_url`` and the
service fetches it; a ``data:`` URI is sent as it is; anything else is a local file, read here and sent
inline as ``input.image``, a ``data:`` URI (the service then needs no access to it). The service checks the
bytes itself (JPEG, PNG or WebP); the type named in the URI is the one the file's first bytes show.
A data URI travels in the request body, so it is bounded by the service's body limit; a large image is
better given by URL.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

__all__ = ["image_input", "mode_for"]

_SIGNATURES: tuple[tuple[bytes, str], ...] = ((b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG\r\n\x1a\n", "image/png"))


def _content_type(head: bytes) -> str:
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    for signature, content_type in _SIGNATURES:
        if head.startswith(signature):
            return content_type
    raise ValueError("the image file is not a JPEG, PNG or WebP image")


def image_input(image: str | os.PathLike[str]) -> dict[str, str]:
    """The ``input`` fields for ``image``: ``{"image_url": url}`` or ``{"image": "data:...;base64,..."}``.
    Raises ``ValueError`` for a file that cannot be read or is no JPEG, PNG or WebP image."""
    text = os.fspath(image)
    if isinstance(image, str) and text.lower().startswith(("https://", "http://")):
        return {"image_url": text}
    if isinstance(image, str) and text.startswith("data:"):
        return {"image": text}
    try:
        data = Path(text).read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read the image file {text!r}: {e.strerror or e}") from None
    content_type = _content_type(data[:12])
    return {"image": f"data:{content_type};base64,{base64.b64encode(data).decode('ascii')}"}


def mode_for(mode: str | None, image: object | None) -> str:
    """The mode to ask for: ``mode`` when given, else ``image_to_video`` with an image, ``text_to_video`` without."""
    if mode is not None:
        return mode
    return "image_to_video" if image is not None else "text_to_video"

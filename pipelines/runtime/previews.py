"""Live previews: a small picture of the latents while the loop denoises, made without another model.

The picture is a linear projection of one latent frame (the middle one) onto RGB: each latent channel
weighs into R, G and B by a table fitted for its VAE (``pipelines.runtime.preview_factors``), chosen by
the latents' channel count: 16 (Wan 2.1 / 2.2 A14B, SkyReels-V2), 48 (Wan 2.2 TI2V-5B), 128 (LTX-2).
Any other count (HunyuanVideo 1.5's 32, the tiny models' random VAEs) has no fitted table and falls back to
its first three channels, each stretched to its own range: a picture of where the latents differ, not of
their colors. Latent frames are 8 or 32 times smaller than the video, so the frame is upscaled by a whole
factor up to ``MAX_WIDTH`` (a wider one is scaled down to it) and JPEG-encoded to at most ``MAX_BYTES``.

``Previews`` is one job's side: when a preview is due (every ``every_steps`` steps and at most once per
``interval_s``), ``show`` renders the latents and hands the ``Preview`` to ``deliver``, which the worker
sends with its next progress write. The adapters call it from their step callback
(``pipelines.runtime.resume.DenoiseSession``), on the denoising thread: its cost is part of the step
(docs/benchmarks.md, "Live previews").
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from foundation.core.media import Preview
from pipelines.runtime.preview_factors import LTXV_128, WAN21_16, WAN22_48, Factors

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = [
    "MAX_BYTES",
    "MAX_WIDTH",
    "PreviewCadence",
    "Previews",
    "encode_jpeg",
    "project_latents",
    "render_preview",
    "unpack_tokens",
]

MAX_WIDTH = 256
MAX_BYTES = 20_000
_QUALITIES = (80, 60, 40, 25)  # tried in turn until the JPEG fits MAX_BYTES

# Fitted tables by latent channel count (the VAEs we host have distinct counts).
_TABLES: dict[int, Factors] = {16: WAN21_16, 48: WAN22_48, 128: LTXV_128}


@dataclass(frozen=True)
class PreviewCadence:
    """How often a job previews: at most every ``every_steps`` steps and at most once per ``interval_s``."""

    every_steps: int = 1
    interval_s: float = 1.0


@dataclass
class Previews:
    """One job's previews: ``due`` says whether step ``step`` makes one, ``show`` makes it and delivers it."""

    deliver: Callable[[Preview], None]
    cadence: PreviewCadence = field(default_factory=PreviewCadence)
    clock: Callable[[], float] = time.monotonic
    seconds: list[float] = field(default_factory=list)  # what each preview cost the denoising thread
    _last: float | None = None

    def due(self, step: int, total: int) -> bool:
        if step % max(1, self.cadence.every_steps) != 0:
            return False
        return self._last is None or self.clock() - self._last >= self.cadence.interval_s

    def show(self, step: int, total: int, latents: torch.Tensor) -> None:
        """Render ``latents`` (batch, channels, frames, height, width) and deliver the preview of this step."""
        started = time.perf_counter()
        preview = render_preview(latents, step, total)
        self._last = self.clock()
        self.seconds.append(time.perf_counter() - started)
        self.deliver(preview)


def render_preview(latents: torch.Tensor, step: int, total: int) -> Preview:
    """The preview of ``latents`` (batch, channels, frames, height, width) at step ``step`` of ``total``."""
    return Preview.of_jpeg(step, total, encode_jpeg(project_latents(latents)))


def project_latents(latents: torch.Tensor) -> np.ndarray:
    """The middle latent frame of the first clip as RGB: uint8, (height, width, 3), at latent resolution."""
    import torch

    if latents.ndim != 5:
        raise ValueError(f"latents shaped (batch, channels, frames, height, width), not {tuple(latents.shape)}")
    frame = latents[0, :, latents.shape[2] // 2].detach().float()  # (channels, height, width)
    frame = torch.nan_to_num(frame)
    table = _TABLES.get(frame.shape[0])
    if table is not None:
        weights, bias = _table_tensors(frame.shape[0], str(frame.device))
        rgb = torch.einsum("chw,cr->rhw", frame, weights) + bias[:, None, None]
        rgb = ((rgb + 1.0) / 2.0).clamp(0.0, 1.0)  # the tables map to [-1, 1], as the VAE's pixels
    else:
        rgb = _first_channels(frame)
    return (rgb * 255.0).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()


def unpack_tokens(latents: torch.Tensor | None, frames: int, aspect: float) -> torch.Tensor | None:
    """Packed latents of a patch-1 transformer (LTX-2's: batch, frames x height x width tokens, channels) as
    (batch, channels, frames, height, width), or None when they are not such. The token grid's width is the
    divisor of the tokens per frame whose width/height is nearest ``aspect`` (the generation's)."""
    if latents is None or latents.ndim != 3 or frames < 1 or latents.shape[1] % frames:
        return None
    area = latents.shape[1] // frames
    width = min((w for w in range(1, area + 1) if area % w == 0), key=lambda w: abs(math.log(w * w / area / aspect)))
    height = area // width
    batch, _, channels = latents.shape
    return latents.reshape(batch, frames, height, width, channels).permute(0, 4, 1, 2, 3)


def _first_channels(frame: torch.Tensor) -> torch.Tensor:
    """The fallback: the first three channels (fewer repeated), each stretched to 0..1 over its own range."""
    import torch

    channels = frame[:3]
    if channels.shape[0] < 3:
        channels = channels.repeat(3, 1, 1)[:3]
    low = channels.amin(dim=(1, 2), keepdim=True)
    span = channels.amax(dim=(1, 2), keepdim=True) - low
    return torch.where(span > 0, (channels - low) / span.clamp_min(1e-12), torch.full_like(channels, 0.5))


@lru_cache(maxsize=8)
def _table_tensors(channels: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    rows, bias = _TABLES[channels]
    return torch.tensor(rows, dtype=torch.float32, device=device), torch.tensor(
        bias, dtype=torch.float32, device=device
    )


def encode_jpeg(rgb: np.ndarray) -> bytes:
    """``rgb`` (height, width, 3) uint8 scaled to at most ``MAX_WIDTH`` wide (up by a whole factor, or down),
    as a JPEG of at most ``MAX_BYTES`` (lower qualities tried in turn; the last one is kept regardless)."""
    from PIL import Image

    image = Image.fromarray(rgb, "RGB")
    width, height = image.size
    factor = MAX_WIDTH / width if width > MAX_WIDTH else max(1, MAX_WIDTH // width)
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    if size != image.size:
        image = image.resize(size, Image.Resampling.BILINEAR)
    data = b""
    for quality in _QUALITIES:
        out = io.BytesIO()
        image.save(out, "JPEG", quality=quality)
        data = out.getvalue()
        if len(data) <= MAX_BYTES:
            break
    return data

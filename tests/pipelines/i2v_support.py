"""Shared pieces of the image-to-video tests: jobs of mode ``image_to_video``, test images, what a perfect model
would give through a tiny model's own VAE, and PSNR."""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from foundation.core.catalog import Catalog
from foundation.core.contract import CreateRequest
from foundation.core.resolve import ResolvedJob, resolve
from worker.input_image import fit_image


def i2v_job(catalog: Catalog, model: str, *, variant: str = "fast", **params: Any) -> ResolvedJob:
    """A request of mode ``image_to_video`` resolved against the catalog (1 s at 144p 16:9 unless told)."""
    params = {"seed": 1, "resolution": "144p", "ratio": "16:9", "duration_seconds": 1, **params}
    request = CreateRequest.model_validate(
        {
            "model": model,
            "mode": "image_to_video",
            "variant": variant,
            "parameters": params,
            "input": {"prompt": "a red fox running through snow"},
        }
    )
    job, _hold = resolve(request, catalog)
    return job


def pattern(seed: int, width: int = 300, height: int = 200) -> Image.Image:
    """A smooth colour pattern (a photo-like image, not noise); different seeds give very different images."""
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    phase = 2.0 * seed
    rgb = np.stack([np.sin(6 * x + phase), np.cos(5 * y - phase), np.sin(4 * (x + y) + 1.7 * phase)], axis=-1)
    return Image.fromarray(((rgb * 0.5 + 0.5) * 255).astype(np.uint8))


def fitted(job: ResolvedJob, seed: int) -> Image.Image:
    """``pattern(seed)`` fitted to the job's generation size, as the worker fits an input image."""
    return fit_image(pattern(seed), job.gen_width, job.gen_height)


def to_uint8(frame: Any) -> np.ndarray:
    """A decoded (3, H, W) frame in [-1, 1] rounded to uint8 (H, W, 3) as the worker's frames are."""
    import torch

    with torch.no_grad():
        scaled = (frame.float() / 2 + 0.5).clamp(0, 1).mul(255).round()
    return scaled.to(torch.uint8).permute(1, 2, 0).numpy()


def wan_round_trip(pipe: Any, image: Image.Image) -> np.ndarray:
    """decode(encode(image)) through a Wan pipeline's VAE: the first frame of a perfect image-as-frame-0 model."""
    import torch

    pixels = pipe.video_processor.preprocess(image, height=image.height, width=image.width).unsqueeze(2)
    with torch.no_grad():
        latents = pipe.vae.encode(pixels.to(pipe.vae.dtype)).latent_dist.mode()
        video = pipe.vae.decode(latents, return_dict=False)[0]
    return to_uint8(video[0, :, 0])


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images in dB (inf when identical)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * float(np.log10(255.0**2 / mse))

"""What fraction of a GPU's peak a job's denoising achieved (MFU), from its FLOPs (``pipelines.runtime.flops``).

``PEAK_BF16_TFLOPS`` holds the dense bf16 peaks of the datacenter GPUs we know (vendor datasheets, without
sparsity); MFU is reported only on those.
"""

from __future__ import annotations

__all__ = ["PEAK_BF16_TFLOPS", "achieved", "peak_tflops"]

# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) by a substring of ``torch.cuda.get_device_name()``;
# the first match wins, so the specific names come first. Sources: NVIDIA H100/H200/A100/L40S/B200 datasheets.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM5 (HBM3)
    ("H200", 989.4),
    ("GH200", 989.4),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.1),
)


def peak_tflops(device: str) -> float | None:
    """The dense bf16 peak of ``device`` (a CUDA device we know), else None (CPU, unknown GPUs)."""
    if not device.startswith("cuda"):
        return None
    import torch

    name = torch.cuda.get_device_name(torch.device(device))
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)


def achieved(flops: float, seconds: float, device: str) -> tuple[float, float | None]:
    """(TFLOP/s achieved, MFU or None when the device's peak is unknown). A job that runs across the GPUs of
    a job group (``models.gpus_per_job``) is measured against all of them."""
    from pipelines.runtime.context_parallel import job_gpus

    tflops = flops / seconds / 1e12 if seconds > 0 else 0.0
    peak = peak_tflops(device)
    return tflops, (tflops / (peak * job_gpus()) if peak else None)

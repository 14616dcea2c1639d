"""Third-party log lines that read as a broken install but are not, kept off the terminal.

Each is matched by its logger and a fixed part of its message, so the same logger's other lines still show.
``quiet_known_harmless`` installs the filters on the loggers by name, before the libraries are imported (a
logger's filters apply to every record it makes, whatever handler prints it). Drop a row once the pinned
version no longer logs it (each row names the version it was seen with).
"""

from __future__ import annotations

import logging

__all__ = ["HARMLESS", "quiet_known_harmless"]

# (logger, message fragment, why it is harmless)
HARMLESS: tuple[tuple[str, str, str], ...] = (
    (
        "torchao",
        "Failed to load",
        # torchao 0.18.0's wheel ships optional C++ kernels that load only where they were built for: _C_mxfp8
        # (Blackwell MX formats) for CPython 3.10 alone, _C_cutlass_90a for Hopper with CUDA. Elsewhere torchao
        # skips them. genworker uses only torchao's float8 dynamic quantization, which runs on torch's _scaled_mm.
        "torchao's optional compiled kernels, unused here",
    ),
    (
        "torch.utils._pytree",
        "is an Enum subclass and is now natively supported",
        # torch 2.13 deprecates registering Enum types as pytree constants; torchao 0.18.0 still registers two
        # (KernelPreference, ScaleCalculationMode) at import. The registration works.
        "a deprecation aimed at torchao's authors",
    ),
    (
        "diffusers.quantizers.torchao.torchao_quantizer",
        "Unable to import `torchao` Tensor objects",
        # diffusers 0.42.1 imports torchao classes moved in torchao 0.18.0 to allow-list them for torch.load of
        # torchao-serialized checkpoints; genworker loads safetensors only.
        "only torchao-pickled checkpoints need them",
    ),
    (
        "transformers.utils.import_utils",
        "requires torchvision (not installed)",
        # transformers 5.24 maps CLIPImageProcessor (Wan 2.1 I2V's image processor) to its torchvision backend and falls
        # back to the PIL one without torchvision, which the worker image does not install: the PIL processor is
        # the one the Wan checkpoints were published with.
        "the PIL image processor is the checkpoints' own",
    ),
    (
        "diffusers.guiders.guider_utils",
        "Guiders are currently an experimental feature",
        # diffusers 0.42.1 logs this for every guider built (HunyuanVideo 1.5 runs CFG through one); the pipeline
        # that ships with the checkpoint uses it.
        "the pipeline's own guidance path",
    ),
)


class _Drop(logging.Filter):
    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment

    def filter(self, record: logging.LogRecord) -> bool:
        return self.fragment not in record.getMessage()


def quiet_known_harmless() -> None:
    """Install the filters (once per process: a second call adds nothing)."""
    for name, fragment, _why in HARMLESS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) and f.fragment == fragment for f in logger.filters):
            logger.addFilter(_Drop(fragment))

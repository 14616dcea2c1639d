"""From a catalog entry to a loaded adapter: the adapter class (imported lazily) and where its weights live.

``ModelSpec.adapter`` is data (``"pipelines.families.wan:WanTextToVideo"``); nothing heavy is imported until a model is
loaded, so the worker and the API start without importing diffusers.

Weights resolution (``resolve_weights``), in order:
- tiny models (``spec.tiny``): ``<runtime.tiny_models_dir>/<spec.weights>``, which must exist;
- an existing local path (absolute, or relative to the working directory);
- ``<runtime.weights_dir>/<hub id>`` when ``weights_dir`` is set and that directory exists;
- the hub id itself, left to ``from_pretrained`` (with ``HF_HUB_OFFLINE=1`` it must be in the local cache).
A local folder pulled by ``genworker weights pull`` is held to the catalog's pin when the model loads
(``hold_to_pin``).
"""

from __future__ import annotations

import importlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.core.errors import JobError, is_out_of_memory
from pipelines.errors import ModelLoadError
from pipelines.runtime.adapter import Adapter
from pipelines.runtime.weights import pin_problems

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec
    from foundation.settings.models import ModelRuntimeSettings

__all__ = [
    "adapter_class",
    "hold_to_pin",
    "hub_revision",
    "load_adapter",
    "resolve_device",
    "resolve_dtype",
    "resolve_weights",
]

log = logging.getLogger("genworker.pipelines")
_ADAPTER = f"{Adapter.__module__}.{Adapter.__qualname__}"


def adapter_class(path: str) -> type[Adapter]:
    """Import ``"package.module:ClassName"`` and return the class, or raise ``ModelLoadError`` saying why."""
    module_name, sep, class_name = path.partition(":")
    if not sep or not module_name or not class_name:
        raise ModelLoadError(f"adapter {path!r} is not of the form 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ModelLoadError(f"adapter {path!r}: cannot import module {module_name!r} ({e})") from e
    cls = vars(module).get(class_name)
    if not isinstance(cls, type):
        raise ModelLoadError(f"adapter {path!r}: module {module_name!r} has no class {class_name!r}")
    if not issubclass(cls, Adapter):  # the base's defaults come with the subclassing (pipelines.runtime.adapter)
        raise ModelLoadError(f"adapter {path!r}: class {class_name!r} does not subclass {_ADAPTER}")
    return cls


def resolve_weights(ref: str, runtime: ModelRuntimeSettings, *, tiny: bool) -> str:
    """Where ``from_pretrained`` should look for ``ref`` (a tiny-model name, a local path or a hub id)."""
    if tiny:
        path = Path(runtime.tiny_models_dir) / ref
        if not path.is_dir():
            raise ModelLoadError(
                f"tiny model weights {str(path)!r} do not exist: build them with "
                f"`python scripts/make_tiny_models.py --out {runtime.tiny_models_dir}`"
            )
        return str(path)
    local = Path(ref).expanduser()
    if local.exists():
        return str(local)
    if runtime.weights_dir:
        under = Path(runtime.weights_dir).expanduser() / ref
        if under.exists():
            return str(under)
    if ref.startswith(("/", ".", "~")):
        raise ModelLoadError(f"weights path {ref!r} does not exist")
    return ref


def hold_to_pin(path: str, ref: str, revision: str | None, runtime: ModelRuntimeSettings) -> None:
    """Refuse a local folder whose manifest shows another commit than the catalog pins, or a half-copied one
    (``models.weights_pin: warn`` only logs it): the worker would otherwise run other weights than the recipe's."""
    problems = pin_problems(Path(path), revision) if Path(path).is_dir() else []  # a hub id: the hub's own pin
    if not problems:
        return
    message = f"weights of {ref} in {path}: {'; '.join(problems)}"
    if runtime.weights_pin == "warn":
        log.warning("%s (loaded anyway: models.weights_pin is warn)", message)
        return
    raise ModelLoadError(f"{message}; pull them again (genworker weights pull), or set models.weights_pin: warn")


def hub_revision(ref: str, path: str, revision: str | None) -> dict[str, str]:
    """``from_pretrained``'s ``revision=`` for ``ref`` when it is loaded from the hub (``path`` is still the hub
    id); a local directory is whatever it holds, so it gets none."""
    return {"revision": revision} if revision and path == ref else {}


def resolve_device(device: str) -> str:
    """``"auto"`` is CUDA when available, else CPU; anything else is passed through (``"cuda:1"``)."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(runtime_dtype: str, catalog_dtype: str, device: str) -> str:
    """``"auto"`` takes the catalog's dtype, except float32 on CPU (bf16 matmuls there are slow and lossy)."""
    if runtime_dtype != "auto":
        return runtime_dtype
    return "float32" if device == "cpu" else catalog_dtype


def load_adapter(spec: ModelSpec, runtime: ModelRuntimeSettings) -> Adapter:
    """Load ``spec``'s adapter on the configured device; out-of-memory propagates unchanged (for the retry)."""
    cls = adapter_class(spec.adapter)
    path = resolve_weights(spec.weights, runtime, tiny=spec.tiny)  # fail with a clear message before heavy imports
    hold_to_pin(path, spec.weights, spec.revision, runtime)
    device = resolve_device(runtime.device)
    dtype = resolve_dtype(runtime.dtype, spec.dtype, device)
    started = time.perf_counter()
    try:
        adapter = cls.load(spec, runtime, device=device, dtype=dtype)
    except JobError:
        raise
    except Exception as e:
        if is_out_of_memory(e):
            raise
        raise ModelLoadError(f"loading {spec.id} with {spec.adapter} failed: {type(e).__name__}: {e}") from e
    log.info(
        "model loaded",
        extra={
            "model": spec.id,
            "device": device,
            "dtype": dtype,
            "elapsed_ms": round(1000 * (time.perf_counter() - started)),
        },
    )
    return adapter

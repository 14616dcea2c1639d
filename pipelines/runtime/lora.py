"""The variants' LoRAs: loaded once with the model, all switched off, and the job's one switched on per job.

A variant's LoRA is loaded under ``lora_adapter_name(mode, variant)``; ``apply_lora`` turns the job's on (the
others off), unfused, so switching variants is exact. A LoRA that does not load here leaves its variant out
(``variants_without_weights`` tells the worker which, before any model loads).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.errors import ModelLoadError
from pipelines.runtime.registry import hold_to_pin, hub_revision, resolve_weights

if TYPE_CHECKING:
    from foundation.core.catalog import ModelSpec
    from foundation.core.resolve import ResolvedJob
    from foundation.settings.models import ModelRuntimeSettings

__all__ = [
    "LoraSource",
    "apply_lora",
    "load_variant_loras",
    "lora_adapter_name",
    "refuse_dropped_keys",
    "variant_lora_files",
    "variants_without_weights",
]

log = logging.getLogger("genworker.pipelines")

# Puts LoRAs on a pipeline, all switched off: the variants' files in production (``variant_lora_files``), random
# ones of the published ranks at full size (``pipelines.simulation.random_pipelines``).
LoraSource = Callable[[Any], None]


def variant_lora_files(spec: ModelSpec, runtime: ModelRuntimeSettings) -> LoraSource:
    """The production ``LoraSource``: every variant's LoRA file (``load_variant_loras``)."""

    def load(pipe: Any) -> None:
        load_variant_loras(pipe, spec, runtime)

    return load


def lora_adapter_name(mode: str, variant: str) -> str:
    """The adapter name a variant's LoRA is loaded under (peft names are module keys: no dots)."""
    return f"{mode}__{variant}"


def variants_without_weights(spec: ModelSpec, runtime: ModelRuntimeSettings) -> list[str]:
    """``mode/variant`` of each of ``spec``'s variants whose LoRA files this node lacks and cannot fetch: a
    local directory (a tiny model's, ``weights_dir``) without the file, or a hub repository whose file is not
    in the hub cache while the hub is offline (``HF_HUB_OFFLINE``, as GPU nodes run). Online, a hub file is
    fetched when the model loads, so it counts as present. The worker leaves these out of what it
    advertises (its heartbeat), so the API neither lists the variant as available nor takes its jobs where
    no worker has it. Cheap: no model is loaded."""
    missing = []
    for mode, mode_spec in spec.modes.items():
        for name, variant in mode_spec.variants.items():
            lora = variant.lora
            if lora is None:
                continue
            files = [lora.weight_name, *([lora.weight_name_2] if lora.weight_name_2 is not None else [])]
            if not all(_lora_file_present(spec, runtime, lora.weights, f, lora.revision) for f in files):
                missing.append(f"{mode}/{name}")
    return missing


def _lora_file_present(
    spec: ModelSpec, runtime: ModelRuntimeSettings, ref: str, filename: str, revision: str | None
) -> bool:
    try:
        path = resolve_weights(ref, runtime, tiny=spec.tiny)
    except ModelLoadError:
        return False
    if spec.tiny or path != ref:  # a local directory: whatever it holds
        return (Path(path) / filename).is_file()
    from huggingface_hub import constants, try_to_load_from_cache

    if not constants.HF_HUB_OFFLINE:
        return True
    return isinstance(try_to_load_from_cache(ref, filename, revision=revision), str)


def load_variant_loras(pipe: Any, spec: ModelSpec, runtime: ModelRuntimeSettings) -> None:
    """Load every variant's LoRA under its variant's name, all switched off (``apply_lora`` turns one on).

    A LoRA that does not load (not downloaded on this node, a bad file) is logged and left out: the model
    and its other variants still serve, and a job of that variant is released for another worker
    (``apply_lora`` raises ``ModelLoadError``)."""
    loaded = False
    for mode, mode_spec in spec.modes.items():
        for name, variant in mode_spec.variants.items():
            lora = variant.lora
            if lora is None:
                continue
            adapter = lora_adapter_name(mode, name)
            try:
                path = resolve_weights(lora.weights, runtime, tiny=spec.tiny)
                hold_to_pin(path, lora.weights, lora.revision, runtime)
                pinned = hub_revision(lora.weights, path, lora.revision)
                for weight_name in (lora.weight_name, lora.weight_name_2):
                    if weight_name is not None:
                        refuse_dropped_keys(pipe, path, weight_name, pinned, allowed=lora.dropped_keys)
                pipe.load_lora_weights(path, weight_name=lora.weight_name, adapter_name=adapter, **pinned)
                if lora.weight_name_2 is not None:  # the second expert's own LoRA, under the same adapter name
                    second = {"weight_name": lora.weight_name_2, "load_into_transformer_2": True, **pinned}
                    pipe.load_lora_weights(path, adapter_name=adapter, **second)
            except Exception as e:  # kept broad: whatever the loader raises, only this variant is lost
                log.warning("%s: LoRA of variant %s not loaded: %s", spec.id, name, e)
                _drop_adapter(pipe, adapter)  # never half a recipe: the first expert's LoRA goes too
                continue
            loaded = True
    if loaded:
        pipe.disable_lora()


def refuse_dropped_keys(
    pipe: Any, path: str, weight_name: str, pinned: dict[str, str], *, allowed: tuple[str, ...]
) -> None:
    """Refuse a LoRA file some of whose keys diffusers' conversion drops: its Wan converter drops LightX2V's
    ``.diff`` weight deltas (logged at info only) and norm deltas, which LightX2V applies, so the variant would
    run another recipe than upstream's. The catalog entry accepts drops by naming the keys
    (``lora.dropped_keys``, ``fnmatch`` patterns): up to as many as the file has keys matching them."""
    from safetensors.torch import load_file

    file = Path(path) / weight_name if Path(path).is_dir() else Path(_hub_file(path, weight_name, pinned))
    raw = load_file(str(file))
    converted = pipe.lora_state_dict(dict(raw))
    converted = converted[0] if isinstance(converted, tuple) else converted
    # Every key converts to one key, except the alphas, folded into the LoRA's scales.
    dropped = len(raw) - sum(key.endswith(".alpha") for key in raw) - len(converted)
    named = sum(any(fnmatch.fnmatch(key, pattern) for pattern in allowed) for key in raw)
    if dropped > named:
        raise ModelLoadError(
            f"{weight_name}: diffusers' LoRA conversion drops {dropped} of its {len(raw)} keys "
            f"({named} named in lora.dropped_keys); the variant would not run the LoRA as published"
        )


def _hub_file(repo: str, filename: str, pinned: dict[str, str]) -> str:
    from huggingface_hub import hf_hub_download

    return str(hf_hub_download(repo, filename, revision=pinned.get("revision")))


def _drop_adapter(pipe: Any, adapter: str) -> None:
    """Delete ``adapter`` from every denoiser that holds it (a variant whose second LoRA failed to load)."""
    for model in (getattr(pipe, "transformer", None), getattr(pipe, "transformer_2", None)):
        if model is not None and adapter in (getattr(model, "peft_config", None) or {}):
            model.delete_adapters([adapter])


def apply_lora(pipe: Any, job: ResolvedJob) -> None:
    """The job's variant LoRA on at its scale (the others off), or every LoRA off for a variant without one.
    Unfused: switching between variants is exact, at the cost of the LoRA's own small matmuls per layer."""
    adapters = pipe.get_list_adapters() if getattr(pipe, "get_list_adapters", None) is not None else {}
    loaded = {name for names in adapters.values() for name in names}
    if job.lora is not None:
        name = lora_adapter_name(job.mode, job.variant)
        if name not in loaded:
            raise ModelLoadError(f"{job.model}: the LoRA of variant {job.variant!r} is not loaded on this worker")
        pipe.enable_lora()
        pipe.set_adapters([name], [job.lora.scale])
    elif loaded:
        pipe.disable_lora()

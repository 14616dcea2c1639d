"""What every diffusers-based adapter does the same way: dtypes, GPU knobs, memory, shape checks, frame and
audio output.

GPU knobs come from the model's runtime profile (catalog ``runtime``, with the worker's ``profile_overrides``);
offloading is skipped off CUDA, so a CPU run places the pipeline with ``pipe.to("cpu")``.
Frames leave the device as uint8 a few at a time, so the host never holds the video as float32.
"""

from __future__ import annotations

import fnmatch
import gc
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from foundation.core.catalog import RuntimeProfile
from foundation.core.contract import PromptTokens
from foundation.core.errors import ErrorCode, JobError
from foundation.core.media import AudioTrack, Media
from pipelines.errors import ModelLoadError
from pipelines.runtime.compile import compile_blocks
from pipelines.runtime.options import check_profile
from pipelines.runtime.registry import hold_to_pin, hub_revision, resolve_weights

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

    from foundation.core.catalog import CacheSpec, ModelSpec
    from foundation.core.resolve import ResolvedJob
    from foundation.settings.models import ModelRuntimeSettings

__all__ = [
    "CHUNK_FRAMES",
    "IMAGE_MODE",
    "apply_cache",
    "apply_fp8",
    "apply_lora",
    "apply_profile",
    "audio_track",
    "check_image",
    "check_job_shape",
    "count_prompt_tokens",
    "free_device_memory",
    "load_dtypes",
    "load_variant_loras",
    "lora_adapter_name",
    "media_from_video",
    "module_bytes",
    "pipeline_options",
    "quiet_progress_bars",
    "refuse_dropped_keys",
    "runtime_profile",
    "step_reporter",
    "synchronize",
    "torch_dtype",
    "uint8_chunks",
    "use_attention_backend",
    "variants_without_weights",
]

log = logging.getLogger("genworker.pipelines")

# Frames converted per step: bounds the temporary float copy to a few frames whatever the video length.
CHUNK_FRAMES = 8
# The mode whose jobs bring an input image (``denoise(..., image=)``); every other mode is text-only.
IMAGE_MODE = "image_to_video"


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def quiet_progress_bars() -> None:
    """No tqdm bars from loading or denoising: the worker reports progress on the record, not stderr. A disabled
    bar still starts tqdm's monitor thread (it polls every bar every 10 s) unless its interval is 0."""
    import diffusers
    import tqdm
    import transformers

    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()
    tqdm.tqdm.monitor_interval = 0


def runtime_profile(spec: ModelSpec, runtime: ModelRuntimeSettings) -> RuntimeProfile:
    """``spec``'s runtime profile with this worker's ``profile_overrides`` for it, checked for its family.

    Raises ``ModelLoadError`` naming the model and the reason (an unknown field, a backend the family
    cannot use), so the worker refuses the model at load instead of failing inside a job.
    """
    override = runtime.profile_overrides.get(spec.id)
    try:
        profile = (
            spec.runtime
            if not override
            else RuntimeProfile.model_validate({**spec.runtime.model_dump(exclude_defaults=True), **override})
        )
        check_profile(spec.family, profile, spec.diffusers)
    except (ValidationError, ValueError) as e:
        raise ModelLoadError(f"{spec.id}: runtime profile refused: {e}") from e
    return profile


def load_dtypes(profile: RuntimeProfile, dtype: str) -> dict[str, Any]:
    """The ``dtype=`` mapping for ``from_pretrained``: the pipeline's dtype, except the profile's components."""
    return {"default": torch_dtype(dtype), **{name: torch_dtype(d) for name, d in profile.dtypes.items()}}


def use_attention_backend(models: list[Any], backend: str) -> None:
    """Run ``models``' attention on ``backend``, and only theirs.

    diffusers' ``set_attention_backend`` also makes its backend the process's active one, which every model
    without a backend of its own then runs on: another model this worker hosts, or one made context parallel,
    which refuses a backend without context parallel (``_native_math``). diffusers' ``attention_backend``
    context restores the active backend on exit."""
    from diffusers import attention_backend

    with attention_backend(backend):
        for model in models:
            model.set_attention_backend(backend)


def apply_profile(pipe: Any, profile: RuntimeProfile, device: str, *, denoisers: list[str]) -> None:
    """Place ``pipe`` on ``device`` with its runtime profile (attention backend, FP8, compile, tiling, offload).

    ``denoisers`` names the repeated-block transformers (``transformer``, ``transformer_2``): they get the
    attention backend and regional compilation. Offloading needs an accelerator; on CPU it is skipped.
    """
    quiet_progress_bars()
    pipe.set_progress_bar_config(disable=True)
    models = [m for name in denoisers if (m := getattr(pipe, name, None)) is not None]
    if profile.attention_backend:
        use_attention_backend(models, profile.attention_backend)
    if profile.fp8 != "none":  # before compile: the compiled blocks then include the casts
        apply_fp8(models, profile.fp8, device)
    if profile.compile:
        # Regional compilation: one compiled block reused N times; far shorter cold start than whole-model.
        compile_blocks(models)
    if profile.vae_tiling:
        pipe.vae.enable_tiling()
    offload = profile.offload
    if offload != "none" and not device.startswith("cuda"):
        log.info("offload=%s needs a CUDA device; running on %s without offload", offload, device)
        offload = "none"
    if offload == "model":
        # One swap per component per job: a few seconds over PCIe, small against minutes of denoising.
        pipe.enable_model_cpu_offload(device=device)
    elif offload == "group":
        import torch

        # Leaf-level groups with a CUDA stream overlap weight copies with compute; the VAEs stay resident.
        small = [n for n in ("vae", "audio_vae", "vocoder") if getattr(pipe, n, None) is not None]
        pipe.enable_group_offload(
            onload_device=torch.device(device), offload_type="leaf_level", use_stream=True, exclude_modules=small
        )
    else:
        pipe.to(device)


def apply_cache(models: list[Any], cache: CacheSpec | None) -> None:
    """Put the job's cache recipe on the denoisers (diffusers' hooks), or take it off: one loaded model serves
    every variant, so the hooks follow the job. The cache's state is reset for each job either way."""
    wanted = cache.model_dump_json() if cache is not None else None
    for model in models:
        current = getattr(model, "_genworker_cache", None)
        if current != wanted:
            if model.is_cache_enabled:
                model.disable_cache()
            if cache is not None:
                model.enable_cache(_cache_config(cache))
            model._genworker_cache = wanted
        if cache is not None:
            model._reset_stateful_cache()


def _cache_config(cache: CacheSpec) -> Any:
    from diffusers.hooks import FirstBlockCacheConfig, TaylorSeerCacheConfig

    if cache.kind == "taylorseer":
        # Lite mode: whole blocks are skipped on predicted steps and the output projection is predicted. Its block
        # pattern matches every family here (``blocks.N``, ``transformer_blocks.N``); the default attention
        # patterns match only modules named ``...attn`` exactly, not Wan's or LTX-2's ``attn1``/``attn2``.
        return TaylorSeerCacheConfig(
            cache_interval=cache.interval, disable_cache_before_step=cache.warmup_steps, use_lite_mode=True
        )
    return FirstBlockCacheConfig(threshold=cache.threshold)


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


# float8 matmuls need the FP8 tensor cores of compute capability 8.9 (Ada) or 9.0 (Hopper) and newer.
FP8_COMPUTE_CAPABILITY = (8, 9)


def apply_fp8(models: list[Any], mode: str, device: str) -> None:
    """FP8 for the denoisers: ``storage`` (layerwise casting: float8_e4m3fn weights, each layer cast up to its
    compute dtype as it runs; norms and embeddings stay as they are) or ``compute`` (torchao's dynamic float8
    matmuls). ``compute`` is refused with ``ModelLoadError`` where it cannot run, so the worker does not host
    the model there instead of failing its jobs."""
    import torch

    if mode == "storage":
        for model in models:
            model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=model.dtype)
        return
    if not device.startswith("cuda") or torch.cuda.get_device_capability(torch.device(device)) < FP8_COMPUTE_CAPABILITY:
        raise ModelLoadError(
            f"fp8 compute needs a CUDA device of compute capability 8.9 or newer (Ada, Hopper); this one is {device}"
            "; use fp8: storage (layerwise casting) here"
        )
    try:
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quantize_
    except ImportError as e:
        raise ModelLoadError("fp8 compute needs torchao installed on the worker (pip install torchao)") from e
    for model in models:
        quantize_(model, Float8DynamicActivationFloat8WeightConfig())


def step_reporter(on_step: Callable[[int, int], None]) -> Any:
    """A diffusers ``callback_on_step_end`` calling ``on_step(done, total)``.

    diffusers calls it right after each scheduler step without catching anything, so whatever ``on_step``
    raises (``JobCanceled``) leaves the denoising loop at once: a cancel costs at most the step in flight.
    """

    def callback(pipe: Any, index: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        on_step(index + 1, int(pipe.num_timesteps))
        return tensors

    return callback


def module_bytes(*objects: Any) -> int:
    """Bytes of parameters and buffers of every ``torch.nn.Module`` among ``objects`` and their attributes."""
    import torch

    seen: set[int] = set()
    total = 0
    for obj in objects:
        candidates = [obj] if isinstance(obj, torch.nn.Module) else list(getattr(obj, "components", {}).values())
        for module in candidates:
            if not isinstance(module, torch.nn.Module):
                continue
            for tensor in [*module.parameters(), *module.buffers()]:
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    total += tensor.numel() * tensor.element_size()
    return total


def count_prompt_tokens(tokenizer: Any, prompt: str, limit: int) -> PromptTokens:
    """``prompt`` against the text encoder's ``limit``, tokenized as the pipeline does (special tokens
    included): the pipelines truncate at ``limit`` without a word, so the job's record says so instead."""
    total = len(tokenizer(prompt, add_special_tokens=True).input_ids)
    return PromptTokens(total=total, kept=min(total, limit), limit=limit, truncated=total > limit)


def free_device_memory(device: str) -> None:
    """Return freed memory to the allocator's owner: Python objects first, then CUDA's cached blocks."""
    gc.collect()
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def synchronize(device: str) -> None:
    """Wait for the device's queued kernels, so a stage's measured time is its own and not the next one's."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def check_image(model_id: str, job: ResolvedJob, image: Image | None) -> Image | None:
    """The image a job of this mode must have (and only it), at the generation size; else a coded refusal."""
    if job.mode == IMAGE_MODE and image is None:
        raise JobError(ErrorCode.invalid_payload, f"{model_id}: an image_to_video job came without its image")
    if job.mode != IMAGE_MODE and image is not None:
        raise JobError(ErrorCode.invalid_payload, f"{model_id}: a {job.mode} job came with an image")
    if image is not None and image.size != (job.gen_width, job.gen_height):
        raise JobError(
            ErrorCode.pipeline_error,
            f"{model_id}: image is {image.size[0]}x{image.size[1]}, the job generates {job.gen_width}x{job.gen_height}",
        )
    return image


def check_job_shape(model_id: str, job: ResolvedJob, *, spatial: int, temporal: int) -> None:
    """Refuse a job whose size is off the family's ``spatial`` stride or whose frames are not ``temporal``k+1.

    The resolver guarantees both, so a mismatch is a catalog bug; it is refused here because pipelines
    silently round sizes and frame counts instead (and LTX-2 would then size its audio for the wrong length).
    """
    problems = []
    if job.gen_width % spatial or job.gen_height % spatial:
        problems.append(f"size {job.gen_width}x{job.gen_height} is not a multiple of {spatial}")
    if job.num_frames % temporal != 1:
        problems.append(f"{job.num_frames} frames is not {temporal}k+1")
    if problems:
        raise JobError(ErrorCode.invalid_parameter, f"{model_id}: " + "; ".join(problems))


def pipeline_options(model_id: str, job: ResolvedJob, allowed: frozenset[str]) -> dict[str, Any]:
    """A copy of ``job.pipeline_kwargs``, refusing keys the family does not take (the catalog checks them at
    load; a job built another way is checked here rather than failing deep inside the pipeline call)."""
    unknown = sorted(set(job.pipeline_kwargs) - allowed)
    if unknown:
        raise JobError(ErrorCode.pipeline_error, f"{model_id}: pipeline_kwargs {unknown} are not options of its family")
    return dict(job.pipeline_kwargs)


def media_from_video(model_id: str, job: ResolvedJob, video: torch.Tensor, audio: AudioTrack | None = None) -> Media:
    """The ``Media`` of a decoded video (1, C, F, H, W) in [-1, 1], after checking it has the job's shape.

    Frames are converted lazily: they leave the device as uint8 chunks when the encoder pulls them.
    """
    _, _, frames, height, width = video.shape
    if (frames, height, width) != (job.num_frames, job.gen_height, job.gen_width):
        raise JobError(
            ErrorCode.pipeline_error,
            f"{model_id} produced {frames}x{height}x{width}, expected "
            f"{job.num_frames}x{job.gen_height}x{job.gen_width}",
        )
    return Media(
        width=width, height=height, fps=float(job.fps), num_frames=frames, chunks=uint8_chunks(video), audio=audio
    )


def uint8_chunks(video: torch.Tensor, chunk_frames: int = CHUNK_FRAMES) -> Iterator[np.ndarray]:
    """Yield a decoded video (1, C, F, H, W) in [-1, 1] as uint8 (n, H, W, C) host arrays, ``chunk_frames`` at a time.

    Quantising happens on the tensor's device, so a GPU copies bytes, not floats, to the host. The rounding
    matches diffusers' own postprocessing ((x / 2 + 0.5).clamp(0, 1) * 255, rounded).
    """
    import torch

    frames = video.shape[2]
    for start in range(0, frames, chunk_frames):
        part = video[0, :, start : start + chunk_frames]
        with torch.no_grad():
            scaled = (part.float() / 2 + 0.5).clamp_(0, 1).mul_(255).round_()
            quantised = scaled.to(torch.uint8).permute(1, 2, 3, 0).contiguous()
        yield quantised.cpu().numpy()


def audio_track(waveform: torch.Tensor, sample_rate: int) -> AudioTrack:
    """A (1, channels, n) waveform as float32 host samples, whole: the encoder fits the track to the
    clip's exact length, and clips and cleans it, in one place (``foundation.media.frames.fit_audio``)."""
    samples = waveform[0].float().cpu().numpy()
    return AudioTrack(samples=np.ascontiguousarray(samples, dtype=np.float32), sample_rate=int(sample_rate))

"""GPU smoke test: the catalog's real architectures at reduced depth, in bf16, against the memory plan.

For every real catalog model with an architecture config (configs/arch/), under its runtime profile:
- the denoising transformer(s) from the real config with ``num_layers`` cut to ``--layers`` (real width,
  random weights, the production dtype layout), a forward pass at the job's token count: the measured peak
  above the weights is the activation the plan estimates (``pipelines.planning.memory_plan.activation_gb``), and
  s/step is measured, then scaled to the real depth;
- the real VAE (full size, random weights, the profile's dtype and tiling) decoding latents of the job's
  size: the measured peak above its weights against ``decode_gb``;
- with ``--weights DIR`` (hub ids under DIR, as ``models.weights_dir``): one short clip per model through the
  production adapter (load, denoise, decode), with its peak memory and seconds.

``make gpu-smoke`` runs it on a CUDA machine. ``--dry-run`` is the CPU form the test suite runs: one layer,
two heads, a tiny size, VAE skipped, so the code path is exercised without a GPU.

    python scripts/gpu_smoke.py                       # every real model, default size, 2 layers
    python scripts/gpu_smoke.py --model ltx-2 --resolution 1080p --seconds 5
    python scripts/gpu_smoke.py --weights /weights    # plus one short real clip per model
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from foundation.core.catalog import ModelSpec, RuntimeProfile, load_catalog  # noqa: E402
from foundation.core.resolve import frames_for, generation_size, round_up  # noqa: E402
from pipelines.planning.memory_plan import (  # noqa: E402
    JobShape,
    activation_gb,
    arch_dir,
    decode_gb,
    load_components,
)

GB = 1e9


@dataclass
class Result:
    model: str
    profile: str
    size: str
    layers: int
    real_layers: int
    activation_gb: float  # measured peak above the weights, one forward
    plan_activation_gb: float
    step_s: float  # one forward at reduced depth (a CFG step runs one or two)
    step_s_full_depth: float  # scaled to the real number of blocks
    decode_gb: float | None = None
    plan_decode_gb: float | None = None
    decode_s: float | None = None
    clip_s: float | None = None
    clip_peak_gb: float | None = None


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="model id (repeatable; default: every planned model)")
    parser.add_argument("--resolution", help="default: the model's default resolution")
    parser.add_argument("--seconds", type=int, help="default: the model's default duration")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks kept (real width)")
    parser.add_argument("--steps", type=int, default=3, help="timed forwards after one warm-up")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--skip-vae", action="store_true")
    parser.add_argument("--weights", type=Path, help="a weights dir: also one short real clip per model")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--dry-run", action="store_true", help="CPU, 1 layer, 2 heads, tiny size, no VAE")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.device, args.layers, args.steps, args.skip_vae = "cpu", 1, 1, True
    return args


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _reset_peak(device: str) -> int:
    """Reset the peak counter; return the bytes allocated now (the baseline the peak is measured above)."""
    import torch

    if not device.startswith("cuda"):
        return 0
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))


def _peak_above(device: str, baseline: int) -> float:
    import torch

    if not device.startswith("cuda"):
        return 0.0  # CPU: no allocator statistics; the dry run checks the code path only
    return (torch.cuda.max_memory_allocated(device) - baseline) / GB


def _build(entry: dict[str, Any], *, layers: int, dry_run: bool, dtype: Any, device: str) -> Any:
    """The component from its real config with fewer blocks (and, dry run, two heads), in the production
    dtype layout (the class's float32-kept modules stay float32)."""
    import diffusers
    import torch

    config = dict(entry["config"])
    config["num_layers"] = layers
    if dry_run:
        for key in ("num_attention_heads", "audio_num_attention_heads"):
            if key in config:
                config[key] = 2
        if "ffn_dim" in config:  # Wan
            config["ffn_dim"] = 4 * 2 * config["attention_head_dim"]
        if config.get("added_kv_proj_dim"):  # Wan 2.1 I2V: image key/value projections at the inner width
            config["added_kv_proj_dim"] = 2 * config["attention_head_dim"]
        if "cross_attention_dim" in config:  # LTX-2: cross-attention width = its inner width
            config["cross_attention_dim"] = 2 * config["attention_head_dim"]
            config["audio_cross_attention_dim"] = 2 * config["audio_attention_head_dim"]
    with torch.device(device):
        module = getattr(diffusers, entry["class"]).from_config(config)
    keep = getattr(module, "_keep_in_fp32_modules", None) or []
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if tensor.is_floating_point():  # tensor by tensor: Module.to would also cast the kept modules
            tensor.data = tensor.data.to(torch.float32 if any(k in name.split(".") for k in keep) else dtype)
    return module.eval()


def _denoiser_inputs(spec: ModelSpec, module: Any, job: JobShape, vae_dims: dict[str, int], device: str) -> Any:
    import torch

    dtype = torch.bfloat16
    lat_f = (job.frames - 1) // vae_dims["temporal"] + 1
    lat_h, lat_w = job.height // vae_dims["spatial"], job.width // vae_dims["spatial"]
    config = module.config
    # Wan's call shape; SkyReels-V2 (generic family) is the Wan 2.1 transformer and takes the same inputs.
    if spec.family == "wan" or type(module).__name__ == "SkyReelsV2Transformer3DModel":
        inputs = {
            "hidden_states": torch.randn(1, config.in_channels, lat_f, lat_h, lat_w, device=device, dtype=dtype),
            "timestep": torch.tensor([500], device=device),
            "encoder_hidden_states": torch.randn(1, 512, config.text_dim, device=device, dtype=dtype),
            "return_dict": False,
        }
        if config.image_dim:  # Wan 2.1 I2V: the CLIP image tokens (257 for ViT-H/14 at 224 px)
            image = torch.randn(1, 257, config.image_dim, device=device, dtype=dtype)
            inputs["encoder_hidden_states_image"] = image
        return inputs
    audio_frames = job.seconds * 25
    text = torch.randn(1, 1024, config.caption_channels, device=device, dtype=dtype)
    return {
        "hidden_states": torch.randn(1, lat_f * lat_h * lat_w, config.in_channels, device=device, dtype=dtype),
        "audio_hidden_states": torch.randn(1, audio_frames, config.audio_in_channels, device=device, dtype=dtype),
        "encoder_hidden_states": text,
        "audio_encoder_hidden_states": text,
        "timestep": torch.tensor([500.0], device=device),
        "num_frames": lat_f,
        "height": lat_h,
        "width": lat_w,
        "audio_num_frames": audio_frames,
        "return_dict": False,
    }


def _job(spec: ModelSpec, args: argparse.Namespace) -> JobShape:
    if args.dry_run:
        side = round_up(64, spec.stride)
        return JobShape(side, side, frames_for(1, spec.frame_rule.multiple, spec.frame_rule.offset) + 8, 1)
    resolution = args.resolution or spec.defaults["resolution"]
    seconds = args.seconds or spec.defaults["duration_seconds"]
    width, height = generation_size(spec, resolution, spec.defaults["ratio"])
    frames = frames_for(seconds * spec.fps, spec.frame_rule.multiple, spec.frame_rule.offset)
    return JobShape(width, height, frames, seconds)


def _profile_label(profile: RuntimeProfile) -> str:
    return f"offload {profile.offload}" + (", VAE tiling" if profile.vae_tiling else "")


def smoke_model(spec: ModelSpec, profile: RuntimeProfile, args: argparse.Namespace) -> Result:
    import torch

    comps = {c.name: c for c in load_components(spec, profile) or []}
    job = _job(spec, args)
    folder = arch_dir() / spec.id
    entry = json.loads((folder / "transformer.json").read_text(encoding="utf-8"))
    module = _build(entry, layers=args.layers, dry_run=args.dry_run, dtype=torch.bfloat16, device=args.device)
    inputs = _denoiser_inputs(spec, module, job, comps["vae"].dims, args.device)
    with torch.no_grad():
        module(**inputs)  # warm-up: kernels chosen, workspaces allocated
        _sync(args.device)
        baseline = _reset_peak(args.device)
        started = time.perf_counter()
        for _ in range(args.steps):
            module(**inputs)
        _sync(args.device)
    step_s = (time.perf_counter() - started) / args.steps
    measured = _peak_above(args.device, baseline)
    real_layers = int(entry["config"]["num_layers"])
    del module, inputs
    result = Result(
        model=spec.id,
        profile=_profile_label(profile),
        size=f"{job.width}x{job.height}x{job.frames}",
        layers=args.layers,
        real_layers=real_layers,
        activation_gb=round(measured, 2),
        plan_activation_gb=round(activation_gb(spec, comps, job), 2),
        # Significant digits, not decimals: a fast step (a few ms on a small dry run) keeps its precision.
        step_s=float(f"{step_s:.4g}"),
        step_s_full_depth=float(f"{step_s * real_layers / args.layers:.4g}"),
    )
    if not args.skip_vae:
        _smoke_decode(spec, profile, comps, job, args, result)
    if args.weights is not None:
        _smoke_clip(spec, args, result)
    return result


def _smoke_decode(
    spec: ModelSpec, profile: RuntimeProfile, comps: dict[str, Any], job: JobShape, args: Any, r: Result
) -> None:
    import diffusers
    import torch

    entry = json.loads((arch_dir() / spec.id / "vae.json").read_text(encoding="utf-8"))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[profile.dtypes.get("vae", spec.dtype)]
    with torch.device(args.device):
        vae = getattr(diffusers, entry["class"]).from_config(entry["config"]).to(dtype).eval()
    if profile.vae_tiling:
        vae.enable_tiling()
    dims = comps["vae"].dims
    channels = vae.config.get("latent_channels") or vae.config.get("z_dim")
    lat_f = (job.frames - 1) // dims["temporal"] + 1
    latents = torch.randn(
        1, channels, lat_f, job.height // dims["spatial"], job.width // dims["spatial"], device=args.device, dtype=dtype
    )
    baseline = _reset_peak(args.device)
    started = time.perf_counter()
    with torch.no_grad():
        vae.decode(latents, return_dict=False)
    _sync(args.device)
    r.decode_s = round(time.perf_counter() - started, 2)
    r.decode_gb = round(_peak_above(args.device, baseline), 2)
    r.plan_decode_gb = round(decode_gb(spec, profile, comps, job), 2)


def _smoke_clip(spec: ModelSpec, args: argparse.Namespace, r: Result) -> None:
    """One short clip through the production adapter, from real weights under ``--weights`` (text-to-video
    modes only: an image-to-video clip needs an input image this script does not have)."""
    if "text_to_video" not in spec.modes:
        print(f"gpu-smoke: {spec.id}: no text_to_video mode, no clip")
        return
    from foundation.core.contract import CreateRequest
    from foundation.core.resolve import resolve
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.adapter import generate
    from pipelines.runtime.registry import load_adapter

    catalog = load_catalog()
    runtime = ModelRuntimeSettings(device=args.device, weights_dir=str(args.weights))
    request = CreateRequest.model_validate(
        {
            "model": spec.id,
            "mode": "text_to_video",
            "variant": "fast" if "fast" in spec.modes["text_to_video"].variants else "standard",
            "parameters": {"resolution": spec.resolutions[0], "duration_seconds": min(spec.durations), "seed": 1},
            "input": {"prompt": "a red fox running through fresh snow at dawn, cinematic"},
        }
    )
    job, _ = resolve(request, catalog)
    baseline = _reset_peak(args.device)
    started = time.perf_counter()
    adapter = load_adapter(spec, runtime)
    media = generate(adapter, job, lambda done, total: None)
    frames = sum(len(chunk) for chunk in media.chunks)
    _sync(args.device)
    r.clip_s = round(time.perf_counter() - started, 1)
    r.clip_peak_gb = round(_peak_above(args.device, baseline), 2)
    adapter.unload()
    if frames != job.num_frames:
        raise SystemExit(f"{spec.id}: clip has {frames} frames, expected {job.num_frames}")


def _table(results: list[Result], device: str) -> str:
    head = (
        "| model | profile | size | blocks | activation GB (plan) | s/step at depth (full depth) | "
        "decode GB (plan) | decode s | clip s (peak GB) |"
    )
    lines = [f"gpu-smoke on {device}", "", head, "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        decode = "—" if r.decode_gb is None else f"{r.decode_gb} ({r.plan_decode_gb})"
        clip = "—" if r.clip_s is None else f"{r.clip_s} ({r.clip_peak_gb})"
        lines.append(
            f"| {r.model} | {r.profile} | {r.size} | {r.layers}/{r.real_layers} | {r.activation_gb} "
            f"({r.plan_activation_gb}) | {r.step_s} ({r.step_s_full_depth}) | {decode} | "
            f"{'—' if r.decode_s is None else r.decode_s} | {clip} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Result]:
    args = _args(argv)
    import torch

    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.profile import runtime_profile

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("gpu-smoke: no CUDA device (use --dry-run for the CPU form)")
    catalog = load_catalog()
    planned = [s for s in catalog.models.values() if not s.tiny and (arch_dir() / s.id / "transformer.json").exists()]
    specs = [catalog.models[m] for m in args.model] if args.model else planned
    for spec in [s for s in specs if s not in planned]:
        print(f"gpu-smoke: {spec.id}: no arch config (configs/arch/{spec.id}/transformer.json): skipped")
    runtime = ModelRuntimeSettings()
    results = [smoke_model(spec, runtime_profile(spec, runtime), args) for spec in specs if spec in planned]
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu (dry run)"
    print(_table(results, name))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()

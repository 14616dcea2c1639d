"""Denoising checkpoints (issue 20): what one costs against a step, and how big one is for the real models.

Per tiny model (real diffusers classes, CPU), in one process:

- ``step_ms``: median denoising step without checkpoints, and with a checkpoint after every step (the GPU
  thread's share of a checkpoint is the difference: the host copy of the latents and solver state);
- ``serialize_ms`` / ``upload_ms``: what the writer thread does with one (``to_bytes``, then the local
  store's atomic ``put_file``), medians over repeats; ``bytes`` raw (tensors) and as written (zlib);
- the tensors per checkpoint by role, to check the size formula below on the tiny shapes.

With ``--crashes N``, what a ``kill -9`` costs: real worker processes (SQLite queue, local store) run the
test-only ``slow-wan`` (40 steps, ~0.15 s each, a checkpoint every 4 steps; tests/integration) and are
killed at a random step; the next worker finishes the job. Denoising redone = steps done when killed minus
the step the next attempt resumed from, with ``worker.checkpoints`` on and off.

Then the same formula at the real models' largest advertised job (sizes from the catalog, latent shapes from
the VAE configs in ``configs/arch``): Wan (UniPC, solver order k) keeps the step's sample, k model outputs
and the last sample: (k + 2) latents; LTX-2 (flow-match Euler, no history) keeps the video and audio
samples, and in its two-stage recipe stage 1's video and audio as well. All float32.

    python scripts/bench_resume.py [--quick] [--crashes N] [--out results.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TINY = ("tiny-wan", "tiny-ltx2", "tiny-ltx2-two-stage")
REAL = ("wan2.1-t2v-14b", "wan2.2-t2v-a14b", "ltx-2")
FLOAT32 = 4


class _Recorder:
    """``Checkpoints`` that keeps every checkpoint in memory (the bench times the writer's work apart)."""

    def __init__(self) -> None:
        self.saved: list[Any] = []

    def load(self) -> None:
        return None

    def refused(self, reason: str) -> None:
        raise AssertionError(reason)

    def discard(self, detail: str) -> None:
        raise AssertionError(detail)

    def resumed(self, step: int, total: int) -> None:
        raise AssertionError("no resume in the bench")

    def due(self, step: int, total: int) -> bool:
        return True

    def save(self, checkpoint: Any) -> None:
        self.saved.append(checkpoint)


def _job(catalog: Any, model: str) -> Any:
    from foundation.core.contract import CreateRequest
    from foundation.core.resolve import resolve

    spec = catalog.models[model]
    params = {**spec.defaults, "seed": 3, "prompt_extend": False, "audio": spec.audio}
    request = CreateRequest.model_validate(
        {
            "model": model,
            "mode": "text_to_video",
            "variant": "standard",
            "parameters": params,
            "input": {"prompt": "a red fox running through fresh snow at dawn"},
        }
    )
    return resolve(request, catalog)[0]


def _step_ms(adapter: Any, job: Any, checkpoints: Any, repeats: int) -> float:
    """Median step time over ``repeats`` denoising runs (first step excluded: it includes the text encoder)."""
    gaps: list[float] = []
    for _ in range(repeats):
        stamps: list[float] = []

        def stamp(done: int, total: int, stamps: list[float] = stamps) -> None:
            stamps.append(time.perf_counter())

        adapter.denoise(job, stamp, checkpoints=checkpoints)
        gaps += [b - a for a, b in itertools.pairwise(stamps)]
    return 1000 * statistics.median(gaps)


def _tensor_bytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _latent_tensors(checkpoint: Any) -> int:
    """Tensors of a latent's shape (video or audio sample shapes) in a checkpoint: what the formula counts."""
    import torch

    shapes = {tuple(t.shape) for outputs in checkpoint.samples for t in outputs if t is not None}
    shapes |= {tuple(t.shape) for t in checkpoint.carried.values()}

    def count(value: Any) -> int:
        if isinstance(value, torch.Tensor):
            return int(tuple(value.shape) in shapes)
        if isinstance(value, dict):
            return sum(count(v) for v in value.values())
        if isinstance(value, list | tuple):
            return sum(count(v) for v in value)
        return 0

    return count(checkpoint.samples) + count(checkpoint.schedulers) + count(list(checkpoint.carried.values()))


def _bench_tiny(cache: Any, catalog: Any, model: str, repeats: int, work: Path) -> dict[str, Any]:
    from foundation.stores.local import LocalStore

    spec = catalog.models[model]
    adapter = cache.get(spec)
    job = _job(catalog, model)
    plain = _step_ms(adapter, job, None, repeats)
    recorder = _Recorder()
    checkpointed = _step_ms(adapter, job, recorder, repeats)
    last = recorder.saved[-1]
    serialize, upload = [], []
    store = LocalStore(work / "store", b"0123456789abcdef0123", "http://127.0.0.1:1", 60)
    data = b""
    for i in range(repeats):
        started = time.perf_counter()
        data = last.to_bytes()
        serialize.append(time.perf_counter() - started)
        path = work / f"ckpt-{i}"
        path.write_bytes(data)
        started = time.perf_counter()
        store.put_file(f"generations/bench/checkpoint/denoise-{i}.ckpt", path, content_type="application/octet-stream")
        upload.append(time.perf_counter() - started)
    raw = _tensor_bytes([last.samples, last.schedulers, list(last.carried.values()), last.generator])
    return {
        "job": f"{job.gen_width}x{job.gen_height}x{job.num_frames} frames, {len(recorder.saved) // repeats} steps",
        "step_ms": round(plain, 2),
        "step_with_checkpoint_ms": round(checkpointed, 2),
        "gpu_thread_ms_per_checkpoint": round(checkpointed - plain, 2),
        "serialize_ms": round(1000 * statistics.median(serialize), 2),
        "upload_ms_local": round(1000 * statistics.median(upload), 2),
        "raw_tensor_bytes": raw,
        "written_bytes": len(data),
        "latent_tensors": _latent_tensors(last),
        "latent_tensors_by_formula": _formula_tensors(spec, two_stage_in_stage_2=True),
    }


# ------------------------------------------------------------------------------------------ real sizes


def _arch(model: str, component: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((ROOT / "configs" / "arch" / model / f"{component}.json").read_text())["config"]
    return config


def _formula_tensors(spec: Any, *, two_stage_in_stage_2: bool) -> int:
    """Latent-shaped tensors per checkpoint: Wan (UniPC order 2) 4; LTX-2 2 (video, audio), 4 in stage 2 of
    the two-stage recipe (plus stage 1's carried video and audio, the video at half the size)."""
    if spec.family == "wan":
        return 2 + 2  # the sample, solver_order (2) model outputs, the last sample
    return 4 if spec.two_stage is not None and two_stage_in_stage_2 else 2


def _real_size(catalog: Any, model: str) -> dict[str, Any]:
    from foundation.core.resolve import generation_size, round_up

    spec = catalog.models[model]
    resolution = spec.resolutions[-1]
    seconds = max(spec.durations)
    width, height = max(
        (generation_size(spec, resolution, ratio) for ratio in spec.ratios), key=lambda size: size[0] * size[1]
    )
    rule = spec.frame_rule
    frames = round_up(seconds * spec.fps - rule.offset, rule.multiple) + rule.offset
    if spec.family == "wan":
        vae = _arch(model, "vae")
        temporal, spatial = 2 ** sum(vae["temperal_downsample"]), 2 ** len(vae["temperal_downsample"])
        video = vae["z_dim"] * ((frames - 1) // temporal + 1) * (height // spatial) * (width // spatial)
        tensors = {"video latents (sample, 2 model outputs, last sample)": 4 * video}
    else:
        vae, audio_vae = _arch(model, "vae"), _arch(model, "audio_vae")
        latent_frames = (frames - 1) // vae["temporal_compression_ratio"] + 1
        s = vae["spatial_compression_ratio"]
        video = vae["latent_channels"] * latent_frames * (height // s) * (width // s)
        per_second = audio_vae["sample_rate"] / audio_vae["mel_hop_length"] / 4  # audio VAE: 4x in time
        mel = audio_vae["mel_bins"] // 2 ** (len(audio_vae["ch_mult"]) - 1)
        audio = audio_vae["latent_channels"] * round(seconds * per_second) * mel
        tensors = {"video sample": video, "audio sample": audio}
        if spec.two_stage is not None:
            tensors |= {"stage-1 video (carried, half size)": video // 4, "stage-1 audio (carried)": audio}
    total = sum(tensors.values()) * FLOAT32
    return {
        "job": f"{resolution} {width}x{height}, {seconds} s = {frames} frames",
        "tensors_mb": {name: round(n * FLOAT32 / 1e6, 2) for name, n in tensors.items()},
        "checkpoint_mb": round(total / 1e6, 1),
    }


def _crash_loss(crashes: int, *, resume: bool, work: Path, seed: int) -> dict[str, Any]:
    """``crashes`` kill -9s of a worker mid-denoise; per crash the steps redone by the next attempt."""
    import random
    import signal

    from foundation.core.catalog import load_catalog
    from foundation.queue.config import QueueSettings
    from foundation.queue.factory import open_queue
    from foundation.settings import settings_env
    from tests.integration.worker_harness import WorkerProcess, make_record, terminal, wait_for, write_test_catalog

    rng = random.Random(seed)
    catalog_path = write_test_catalog(work / "catalog.yaml")
    catalog = load_catalog(catalog_path)
    step_log = work / "steps.log"
    settings = {
        "data_dir": str(work / "data"),
        "catalog_path": str(catalog_path),
        "queue": {"backend": "sqlite", "lease_ttl_s": 2},
        "models": {"tiny_models_dir": str(work / "tiny")},
        "worker": {
            "hosted_models": ["slow-wan"],
            "preload": ["slow-wan"],
            "heartbeat_s": 1,
            "reclaim_interval_s": 1,
            "checkpoints": resume,
        },
        "encoder": {"preset": "ultrafast"},
    }
    env = {**settings_env(settings), "GENWORKER_TEST_STEP_LOG": str(step_log)}
    queue = open_queue(QueueSettings(backend="sqlite", sqlite_path=str(work / "data" / "queue.db"), lease_ttl_s=2))
    worker = WorkerProcess(env, work / "worker-0.log").start().wait_ready()
    runs: list[dict[str, int]] = []
    try:
        for i in range(crashes):
            record = make_record(catalog, "slow-wan", variant="long")
            queue.enqueue(record)
            kill_at = rng.randint(6, 34)

            def reached(_: Any, prompt: str = record.input.prompt, step: int = kill_at) -> bool:
                return _steps_done(step_log, prompt) >= step

            wait_for(queue, record.id, reached, timeout_s=120)
            worker.signal(signal.SIGKILL)
            worker.wait_exit()
            killed_at = _steps_done(step_log, record.input.prompt)
            worker = WorkerProcess(env, work / f"worker-{i + 1}.log").start().wait_ready()
            done, _ = wait_for(queue, record.id, terminal, timeout_s=120)
            resumed = done.resumed_from_step or 0
            runs.append(
                {"killed_at_step": killed_at, "resumed_from_step": resumed, "steps_redone": killed_at - resumed}
            )
    finally:
        worker.stop()
        queue.close()
    redone = [run["steps_redone"] for run in runs]
    return {
        "runs": runs,
        "median_steps_redone": statistics.median(redone),
        "mean_steps_redone": statistics.mean(redone),
    }


def _steps_done(step_log: Path, prompt: str) -> int:
    """The highest step SlowWan logged for ``prompt`` (its ``on_step`` returned: the step ran)."""
    if not step_log.exists():
        return 0
    steps = [int(line.split("\t")[1]) for line in step_log.read_text().splitlines() if line.startswith(prompt + "\t")]
    return max(steps, default=0)


def crash_run(crashes: int, seed: int = 1) -> dict[str, Any]:
    from pipelines.tiny.builders import build_all

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-resume-crash-") as tmp:
        build_all(str(Path(tmp) / "tiny"))
        for resume in (True, False):
            work = Path(tmp) / ("resume" if resume else "restart")
            work.mkdir()
            (work / "tiny").symlink_to(Path(tmp) / "tiny")
            results["with_checkpoints" if resume else "without"] = _crash_loss(
                crashes, resume=resume, work=work, seed=seed
            )
    step_s = 0.15  # SlowWan's per-step sleep for ``long``, plus the tiny model's ~10 ms of compute
    return {
        "notes": "slow-wan: 40 steps, ~0.16 s each, checkpoint every 4 steps; killed at a random step in 6..34.",
        "step_s": step_s,
        **results,
    }


def run(quick: bool = False, gpu: bool = False) -> dict[str, Any]:
    from foundation.core.catalog import load_catalog
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.cache import ModelCache
    from pipelines.tiny.builders import build_all

    catalog = load_catalog()
    repeats = 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        work = Path(tmp)
        build_all(str(work / "tiny"))
        runtime = ModelRuntimeSettings(device="cpu", tiny_models_dir=str(work / "tiny"), cache_budget_gb=1000.0)
        cache = ModelCache(runtime)
        tiny = {model: _bench_tiny(cache, catalog, model, repeats, work) for model in TINY}
        cache.clear()
    real = {model: _real_size(catalog, model) for model in REAL if model in catalog.models}
    return {
        "notes": "Tiny models on CPU; step_ms medians over repeated runs in one process. gpu_thread_ms is the "
        "difference of two medians (noisy at tiny step times). Real sizes by formula, checked on the tiny shapes "
        "(latent_tensors == latent_tensors_by_formula).",
        "tiny": tiny,
        "real": real,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--crashes", type=int, default=0, help="also kill -9 this many workers per mode")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = run(quick=args.quick)
    if args.crashes:
        results["crashes"] = crash_run(args.crashes)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)

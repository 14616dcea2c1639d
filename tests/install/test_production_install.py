"""The worker exactly as a GPU node installs it (``prod_venv``: the lock, the two wheels, the ``worker`` extra,
no test or dev extras, run from outside the checkout) does everything a worker does:

- every module the shipped code imports imports there (the scan is derived from the code, so a new import
  whose distribution the extra lacks turns this red: torchao was such a gap);
- ``genworker catalog`` and ``genworker plan`` find the catalog and the architecture configs in the wheel;
- ``genworker generate --jobs`` runs every tiny model and every kind of job the catalog offers (family x mode,
  LoRA, step cache, two-stage, audio, each prompt extension method, FP8 storage) in one process; LTX-2's
  image_to_video needs PyAV, the other known gap;
- ``genworker worker`` on the SQLite queue of a data dir, killed with SIGKILL mid-denoise after a checkpoint,
  restarted, finishes the job from that checkpoint into a playable MP4.

Right after the install the import check, ``catalog``, ``plan`` and the jobs start together as processes of
their own, and the worker test runs beside them: each process spends seconds importing torch and diffusers,
and on two cores that overlaps instead of adding up. Each test then waits for its own process.
"""

from __future__ import annotations

import importlib.metadata
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image

from foundation.core.catalog import ModelSpec, default_catalog_path, load_catalog
from foundation.core.contract import GenerationRecord, Stage, Status
from foundation.queue.factory import open_queue
from foundation.settings import load_settings, settings_env
from foundation.stores.factory import open_store
from tests.install.prod_venv import IMPORT_CHECK, Background, ProdInstall, imported_modules, install, own_packages
from tests.integration.worker_harness import WorkerProcess, make_record, terminal, wait_for
from tests.integration.worker_media import assert_playable_mp4
from worker.checkpoints import checkpoint_key

# The first test pays the install and runs beside everything the others wait for. Bounds, not expectations: on
# 2 cores that other work shares, a process importing torch and diffusers can take minutes instead of seconds.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
# The install and what runs in it: make test-install (also in .ci/run); make test keeps test_wheel.py's short version.
in_the_install = pytest.mark.install
SLOW_S = 600.0

# One job per kind that matters; test_the_jobs_cover_the_catalog keeps it complete as the catalog grows.
IMAGE = "in.png"
JOBS: list[dict[str, Any]] = [
    {"model": "tiny-wan", "variant": "fast", "prompt_extend": True},  # Wan; the chat LLM extends the prompt
    {"model": "tiny-wan-a14b", "variant": "cached"},  # Wan 2.2 T2V: two experts, TaylorSeer on both
    {"model": "tiny-wan-i2v", "variant": "fast", "image": IMAGE},  # Wan 2.1 I2V: CLIP image encoder
    {"model": "tiny-wan-i2v-a14b", "variant": "distilled", "image": IMAGE},  # two experts, a LoRA each, order 1
    {"model": "tiny-wan-ti2v", "variant": "fast", "image": IMAGE},  # Wan 2.2 TI2V: its own VAE
    {"model": "tiny-ltx2", "variant": "fast", "audio": True, "prompt_extend": True},  # its text encoder extends
    {"model": "tiny-ltx2", "variant": "fast", "image": IMAGE},  # diffusers re-encodes the image with PyAV
    {"model": "tiny-ltx2-two-stage", "variant": "fast"},  # latent upsampler + distilled LoRA
    {"model": "tiny-ltx2.5", "variant": "standard", "image": IMAGE},  # ancestral stage 1, the diffusion decoder
    {"model": "tiny-ltx2.5-dev", "variant": "standard"},  # its transformer from transformer_full/, CFG + LoRA
    {"model": "tiny-hunyuan15", "variant": "fast"},  # the generic diffusers adapter
    {"model": "tiny-hunyuan15-i2v", "variant": "fast", "image": IMAGE},  # generic image_to_video: SigLIP
    {"model": "tiny-skyreels-v2", "variant": "fast"},  # generic, with FP8 storage (below)
]
FP8 = {"tiny-skyreels-v2": {"fp8": "storage"}}
SHIPPED_CATALOG = ("foundation", "core", "configs", "models.yaml")  # where the wheel puts it (pyproject.toml)


def test_the_jobs_cover_the_catalog() -> None:
    """Every tiny model, and every kind of job its entry offers, is among JOBS."""
    catalog = load_catalog(default_catalog_path())
    tiny = [m for m in catalog.models.values() if m.tiny]
    offered = {k for m in tiny for mode, spec in m.modes.items() for v in spec.variants for k in _kinds(m, mode, v)}
    ran = {k for job in JOBS for k in _kinds(catalog.models[job["model"]], _mode(job), _variant(job), job)}
    assert offered <= ran, sorted(offered - ran)
    assert {m.id for m in tiny} <= {job["model"] for job in JOBS}
    assert set(FP8) <= {job["model"] for job in JOBS}


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> ProdInstall:
    return install(tmp_path_factory.mktemp("prod-install"))


@pytest.fixture(scope="module")
def runs(prod: ProdInstall, tiny_models_dir: Path) -> Iterator[dict[str, Any]]:
    """The import check, ``catalog``, ``plan`` and the jobs, started together; the tests below wait for them."""
    third_party = _third_party_imports(prod)
    started = {
        "imports": prod.start("imports", ["python", "-c", IMPORT_CHECK, *sorted(third_party)], prod.env()),
        "catalog": prod.start("catalog", ["genworker", "catalog"], prod.env()),
        "plan": prod.start("plan", ["genworker", "plan", "--gpu", "h100-80gb"], prod.env()),
        "jobs": _start_jobs(prod, tiny_models_dir),
    }
    yield {**started, "third_party": third_party}
    for background in started.values():
        background.stop()


@in_the_install
def test_a_killed_worker_s_job_resumes_from_its_checkpoint(
    prod: ProdInstall, runs: dict[str, Any], tiny_models_dir: Path, tmp_path: Path
) -> None:
    """One job on the worker's own SQLite queue and local store: SIGKILL after its first checkpoint, then a
    restarted worker finishes it as attempt 2 from that checkpoint, end to end (encode, upload, record).
    ``runs`` is started first, so the other checks work beside this one."""
    data = prod.outside / "worker"
    catalog_path = _resumable_catalog(data / "catalog.yaml")
    values = {
        "data_dir": str(data),
        "catalog_path": str(catalog_path),
        "queue": {"lease_ttl_s": 2},
        "models": {"tiny_models_dir": str(tiny_models_dir)},
        "worker": {"hosted_models": ["tiny-wan"], "preload": ["tiny-wan"], "heartbeat_s": 1, "reclaim_interval_s": 1},
    }
    settings = load_settings(None, **values)
    store = open_store(settings.store, data_dir=settings.data_dir)
    command = [str(prod.bin / "genworker"), "worker"]
    env = prod.env(settings_env(values))
    with _stopping() as workers, closing(open_queue(settings.queue)) as queue:
        workers.append(WorkerProcess(env, tmp_path / "first.log", command=command, cwd=prod.outside).start())
        first = workers[-1].wait_ready(timeout_s=SLOW_S)
        record = make_record(load_catalog(catalog_path), "tiny-wan", variant="long", duration_seconds=1)
        queue.enqueue(record)

        def killable(r: GenerationRecord) -> bool:  # checkpointed mid-denoise, or (too early) finished
            return r.terminal or _checkpointed(r, store.exists(checkpoint_key(r.id)))

        seen, _ = wait_for(queue, record.id, killable, timeout_s=SLOW_S)
        assert seen.status is Status.running, f"finished before it could be killed: {seen!r}"
        first.signal(signal.SIGKILL)
        assert first.wait_exit() == -signal.SIGKILL
        workers.append(WorkerProcess(env, tmp_path / "second.log", command=command, cwd=prod.outside).start())
        done, _ = wait_for(queue, record.id, terminal, timeout_s=SLOW_S)
        assert done.status is Status.succeeded, (done.error, workers[-1].log_tail())
        assert done.attempt == 2 and done.resumed_from_step is not None and done.resumed_from_step % 2 == 0, done
        video = next(a for a in done.artifacts if a.content_type == "video/mp4")
        mp4 = store.read_bytes(video.key, max_bytes=10**8)
        assert mp4 is not None
        assert_playable_mp4(mp4, width=256, height=144, frames=4, duration_s=1.0, audio_channels=None)


@in_the_install
def test_every_module_the_shipped_code_imports_imports(runs: dict[str, Any]) -> None:
    """No module is exempt: our code imports no GPU-only kernel package itself (diffusers imports flash_attn or
    sageattention by name only when a profile selects that attention backend, which this scan does not see).
    One imported directly would need its own line here, with the reason the image may lack it."""
    third_party: dict[str, str] = runs["third_party"]
    assert {"torch", "diffusers", "torchao", "peft"} <= set(third_party)  # the scan sees function-level imports
    proc = runs["imports"].result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    distributions = importlib.metadata.packages_distributions()
    missing = [
        f"{m} (distribution {', '.join(distributions.get(m, [m]))}; imported by {third_party[m]}): {why}"
        for m, why in sorted(failed.items())
    ]
    header = "not importable in the production install (add it to the worker extra, then make lock):\n"
    assert not missing, header + "\n".join(missing)


@in_the_install
def test_catalog_and_plan_read_the_configs_shipped_in_the_wheel(prod: ProdInstall, runs: dict[str, Any]) -> None:
    catalog, plan = runs["catalog"].result(), runs["plan"].result()
    assert catalog.returncode == 0, catalog.stderr[-3000:]
    assert plan.returncode == 0, plan.stderr[-3000:]
    shipped = load_catalog(prod.site_packages.joinpath(*SHIPPED_CATALOG))
    assert set(json.loads(catalog.stdout)) == set(shipped.models)
    real = [m for m in shipped.models.values() if not m.tiny]
    assert real and all(f"**`{m.id}`**" in plan.stdout for m in real), plan.stdout[-3000:]
    assert "no arch config" not in plan.stdout  # every real model planned from configs/arch in the wheel


@in_the_install
def test_every_kind_of_job_generates(runs: dict[str, Any]) -> None:
    proc = runs["jobs"].result()
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    failed = [
        f"job {r['job']} {JOBS[r['job'] - 1]}: {r['error']['code']}: {r['error']['message']}"
        for r in results
        if "error" in r
    ]
    assert not failed and proc.returncode == 0, "\n".join([*failed, proc.stderr[-3000:]])
    assert [r["job"] for r in results] == list(range(1, len(JOBS) + 1))
    for job, result in zip(JOBS, results, strict=True):
        video = next(a for a in result["artifacts"] if a["kind"] == "video")
        assert (video["width"], video["height"], video["duration_seconds"]) == (256, 144, 1.0), (job, video)
        channels = video["audio"]["channels"] if video["audio"] else None
        assert channels == 2 or not job.get("audio"), (job, video)
        mp4 = Path(result["video"]).read_bytes()
        assert_playable_mp4(mp4, width=256, height=144, frames=video["frames"], duration_s=1.0, audio_channels=channels)
        if job.get("prompt_extend"):
            assert result["prompt_extension"] == {"status": "applied", "reason": None}, (job, result)


def _third_party_imports(prod: ProdInstall) -> dict[str, str]:
    """Each module the installed genworker packages import, outside the stdlib and themselves: file importing it."""
    ours = own_packages(prod.site_packages)
    assert {"genworker", "worker", "pipelines", "api", "genworker_client"} <= ours
    found: dict[str, str] = {}
    for package in sorted(ours):
        if (prod.site_packages / package).is_dir():
            found |= imported_modules(prod.site_packages / package)
    return {m: where for m, where in found.items() if m not in sys.stdlib_module_names and m not in ours}


def _start_jobs(prod: ProdInstall, tiny_models_dir: Path) -> Background:
    work = prod.outside / "generate"
    work.mkdir()
    Image.new("RGB", (320, 240), (200, 80, 40)).save(work / IMAGE)
    lines = [{"prompt": "a red fox running through snow", "duration": 1, "seed": 5, **job} for job in JOBS]
    lines = [{**line, "image": str(work / IMAGE)} if "image" in line else line for line in lines]
    (work / "jobs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    models = {"tiny_models_dir": str(tiny_models_dir), "profile_overrides": FP8}
    env = prod.env(settings_env({"data_dir": str(work / "var"), "models": models}))
    return prod.start(
        "jobs", ["genworker", "generate", "--jobs", str(work / "jobs.jsonl"), "--out-dir", str(work)], env
    )


def _checkpointed(record: GenerationRecord, has_checkpoint: bool) -> bool:
    return record.status is Status.running and record.stage is Stage.denoising and has_checkpoint


def _resumable_catalog(path: Path) -> Path:
    """tiny-wan as the catalog has it, checkpointing every 2 steps, with a 12-step variant to be killed in."""
    catalog = yaml.safe_load(default_catalog_path().read_text(encoding="utf-8"))
    entry = next(m for m in catalog["models"] if m["id"] == "tiny-wan")
    entry["checkpoints"] = {"every_steps": 2}
    entry["modes"]["text_to_video"]["variants"]["long"] = {"steps": 12, "guidance_scale": 1.0, "flow_shift": 3.0}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"models": [entry]}, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


@contextmanager
def _stopping() -> Iterator[list[WorkerProcess]]:
    """The workers a test appends here are stopped (by PID) whatever its outcome."""
    workers: list[WorkerProcess] = []
    try:
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def _mode(job: dict[str, Any]) -> str:
    return "image_to_video" if "image" in job else "text_to_video"


def _variant(job: dict[str, Any]) -> str:
    return str(job.get("variant", "standard"))


def _kinds(spec: ModelSpec, mode: str, variant: str, job: dict[str, Any] | None = None) -> set[str]:
    """What a job exercises; for a catalog entry (``job`` None) what it offers, audio and extension included."""
    v = spec.modes[mode].variants[variant]
    kinds = {f"{spec.family} {mode}"}
    kinds |= {f"{spec.family} LoRA"} if v.lora is not None else set()
    kinds |= {f"{spec.family} cache {v.cache.kind}"} if v.cache is not None else set()
    kinds |= {f"{spec.family} sampler order {v.sampler.solver_order}"} if v.sampler is not None else set()
    kinds |= {f"{spec.family} two-stage"} if spec.two_stage is not None else set()
    if spec.audio if job is None else job.get("audio"):
        kinds.add(f"{spec.family} audio")
    if spec.prompt_extend is not None and (job is None or job.get("prompt_extend")):
        kinds.add(f"prompt_extend {spec.prompt_extend.method}")
    return kinds

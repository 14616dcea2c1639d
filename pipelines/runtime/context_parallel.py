"""One job across the GPUs of a node (``models.gpus_per_job``): diffusers' context parallel, Ulysses attention.

A worker with ``gpus_per_job = N > 1`` is N processes started by ``torchrun --nproc-per-node N genworker
worker``, one per GPU: one process group per job slot. Rank 0 is the worker (it claims, extends the prompt,
decodes, encodes, uploads, reports); ranks 1..N-1 are followers (``follow``) that only run the denoising
transformer beside it. Each rank runs the whole pipeline call with the same job and seed, so every rank
holds the same latents and text embeddings; inside the denoisers diffusers' context-parallel hooks split
the video tokens N ways at the first block, exchange heads for tokens around each attention (Ulysses
all-to-all) and gather the output at ``proj_out``. Each GPU computes ~1/N of the transformer, so one job's
denoising takes ~1/N of the time plus the all-to-all traffic.

Rank 0 keeps the followers in step over a small gloo "control" group, in the order its own collectives
happen (one lock around each order and the work it starts):

- ``load`` / ``unload`` a model (loading enables context parallel: new device meshes, a collective);
- ``denoise`` a job (the resolved job as JSON, and the fitted input image of an image job);
- after every step, whether to go on: when rank 0's step callback raises (cancel, drain), every rank stops
  at the same step, so no rank waits in a collective for one that left;
- ``stop`` when the worker exits.

Not supported with ``gpus_per_job > 1``: resuming from denoising checkpoints (the adapter is not
``resumable``: followers would recompute steps that rank 0 restores). An error on one rank only (not the
same error on all) leaves the others in a collective until its timeout; the follower then exits and torchrun
ends the group, the job's lease lapses and the queue re-delivers it.

On CPU (gloo) Ulysses needs the sequence and the head count divisible by N; on CUDA the "anything" mode
lifts both (uneven all-gathers, which gloo lacks). Ring attention is not offered: it needs an attention
kernel that returns the log-sum-exp (flash, cuDNN), which no CPU backend does, so it could not be tested here.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from foundation.core.errors import JobError, is_out_of_memory
from pipelines.errors import FollowerStopped, ModelLoadError, ParallelSetupError
from pipelines.runtime.adapter import Adapter
from pipelines.runtime.diffusers_adapter import DiffusersAdapter
from pipelines.runtime.registry import load_adapter

if TYPE_CHECKING:
    from PIL.Image import Image

    from foundation.core.catalog import Catalog, ModelSpec
    from foundation.core.contract import PromptTokens
    from foundation.core.media import Media, StepCallback
    from foundation.core.resolve import ResolvedJob
    from foundation.settings.models import ModelRuntimeSettings
    from pipelines.runtime.adapter import Latents
    from pipelines.runtime.previews import Previews
    from pipelines.runtime.resume import Checkpoints

__all__ = ["JobGroup", "ParallelAdapter", "follow", "job_gpus", "join", "leave", "load_across_gpus", "parallelize"]

log = logging.getLogger("genworker.pipelines.context_parallel")

# Followers wait on the control group between jobs for as long as the worker is idle.
_IDLE_TIMEOUT = timedelta(days=365)
_DENOISERS = ("transformer", "transformer_2")
_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class JobGroup:
    """This process's place in the job's process group."""

    rank: int
    size: int
    device: str  # "cuda:<local rank>" or "cpu"
    control: Any  # the gloo group that carries orders (torch.distributed.ProcessGroup)
    lock: threading.RLock


@dataclass(frozen=True)
class _Order:
    kind: Literal["load", "unload", "denoise", "stop"]
    model: str = ""
    job: str = ""  # ResolvedJob JSON
    image: Any = None  # PIL image of an image_to_video job


class _Process:
    """This process's job group: torch.distributed's state is per process; the control group lives beside it."""

    group: JobGroup | None = None


def join(gpus_per_job: int, *, timeout: timedelta | None = None) -> JobGroup:
    """Join the process group torchrun started (NCCL on CUDA, else gloo); each rank takes its local GPU.
    ``timeout``: for forming the group and for the denoisers' collectives (None: torch's default)."""
    import torch
    import torch.distributed as dist

    missing = [name for name in _TORCHRUN_ENV if name not in os.environ]
    if missing:
        raise ParallelSetupError(
            f"models.gpus_per_job={gpus_per_job} needs the worker started by "
            f"`torchrun --nproc-per-node {gpus_per_job} genworker worker` (missing {', '.join(missing)})"
        )
    size, local_rank = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if size != gpus_per_job:
        raise ParallelSetupError(f"models.gpus_per_job={gpus_per_job} but torchrun started {size} processes")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # "cuda" now means this rank's GPU, for every later .to("cuda")
        backend, device = "nccl", f"cuda:{local_rank}"
    else:
        backend, device = "gloo", "cpu"
    dist.init_process_group(backend, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=_IDLE_TIMEOUT)
    group = _Process.group = JobGroup(dist.get_rank(), size, device, control, threading.RLock())
    log.info("joined the job group", extra={"rank": group.rank, "size": size, "device": device})
    return group


def leave() -> None:
    """Rank 0: tell the followers to stop; every rank: leave the process group."""
    import torch.distributed as dist

    group = _Process.group
    if group is None:
        return
    if group.rank == 0:
        _send(group, _Order("stop"))
    dist.destroy_process_group()
    _Process.group = None


def job_gpus() -> int:
    """How many GPUs run each job in this process (1 outside a job group)."""
    return _Process.group.size if _Process.group is not None else 1


def load_across_gpus(spec: ModelSpec, runtime: ModelRuntimeSettings) -> ParallelAdapter:
    """Load ``spec`` on this rank and enable context parallel on it; every rank of the job group calls it
    (rank 0 from the model cache, the followers on rank 0's order)."""
    adapter = load_adapter(spec, runtime)
    try:
        return parallelize(adapter, spec)
    except JobError:
        raise
    except Exception as e:
        if is_out_of_memory(e):
            raise
        raise ModelLoadError(f"context parallel for {spec.id} failed: {type(e).__name__}: {e}") from e


def parallelize(adapter: Adapter, spec: ModelSpec) -> ParallelAdapter:
    """Enable context parallel on a freshly loaded adapter's denoisers (rank 0 first orders the followers to
    load it, so both sides build their meshes together)."""
    group = _require_group()
    with group.lock:
        if group.rank == 0:
            _send(group, _Order("load", model=spec.id))
        pipe = _pipeline_of(adapter)
        try:
            for name in _DENOISERS:
                if (model := getattr(pipe, name, None)) is not None:
                    _enable(model, group)
        except BaseException:
            adapter.unload()  # the same error on every rank (same model, same config): each frees its copy
            raise
    return ParallelAdapter(adapter, group)


def _pipeline_of(adapter: Adapter) -> Any:
    """A diffusers adapter's pipeline, whose denoisers are made context parallel; None for any other model."""
    return adapter.pipe if isinstance(adapter, DiffusersAdapter) else None


class ParallelAdapter(Adapter):
    """Rank 0's view of a context-parallel model: the adapter, with every denoise mirrored on the followers.

    Not ``resumable``: a resumed job would skip steps on rank 0 that the followers compute."""

    resumable = False

    def __init__(self, inner: Adapter, group: JobGroup) -> None:
        self.inner = inner
        self._group = group
        self.spec: ModelSpec = inner.spec
        self.options = inner.options  # type: ignore[misc]  # per instance: the wrapped family's options
        self.device = inner.device
        self.profile = inner.profile
        self.pipe = _pipeline_of(inner)  # what the compile warm-up falls back to eager on
        self.previewable = inner.previewable  # rank 0 previews its own latents; the followers send none

    @classmethod
    def load(cls, spec: ModelSpec, runtime: ModelRuntimeSettings, *, device: str, dtype: str) -> Adapter:
        raise NotImplementedError("loaded through load_across_gpus")

    def prompt_tokens(self, job: ResolvedJob) -> PromptTokens | None:
        return self.inner.prompt_tokens(job)

    def denoise(
        self,
        job: ResolvedJob,
        on_step: StepCallback,
        *,
        image: Image | None = None,
        checkpoints: Checkpoints | None = None,
        previews: Previews | None = None,
    ) -> Latents:
        if checkpoints is not None:  # not resumable: the worker keeps no checkpoints for it
            raise ValueError("a context-parallel model does not resume from checkpoints")
        with self._group.lock:
            _send(self._group, _Order("denoise", model=job.model, job=job.model_dump_json(), image=image))
            return self.inner.denoise(job, _leading(on_step, self._group), image=image, previews=previews)

    def decode(self, latents: Latents, job: ResolvedJob) -> Media:
        return self.inner.decode(latents, job)

    def extend_prompt(
        self, prompt: str, *, max_new_tokens: int, timeout_s: float, seed: int, image: Image | None = None
    ) -> str:
        conditioning = {"image": image} if image is not None else {}
        return self.inner.extend_prompt(
            prompt, max_new_tokens=max_new_tokens, timeout_s=timeout_s, seed=seed, **conditioning
        )

    def memory_bytes(self) -> int:
        return self.inner.memory_bytes()

    def unload(self) -> None:
        with self._group.lock:
            _send(self._group, _Order("unload", model=self.spec.id))
            self.inner.unload()


def follow(catalog: Catalog, runtime: ModelRuntimeSettings) -> int:
    """A follower rank's loop: load, denoise and unload as rank 0 orders, until ``stop``. Returns an exit code."""
    from foundation.core.resolve import ResolvedJob

    group = _require_group()
    loaded: dict[str, ParallelAdapter] = {}
    while (order := _receive(group)).kind != "stop":
        if order.kind == "load":
            try:
                loaded[order.model] = load_across_gpus(catalog.models[order.model], runtime)
            except Exception as e:  # rank 0 met it too and does not host the model: stay for the next order
                log.warning("follower load failed: %s", e, extra={"model": order.model})
        elif order.kind == "unload":
            loaded.pop(order.model).inner.unload()
        else:
            job = ResolvedJob.model_validate_json(order.job)
            conditioning = {"image": order.image} if order.image is not None else {}
            try:
                loaded[order.model].inner.denoise(job, _following(group), **conditioning)
            except FollowerStopped:
                pass
            except Exception as e:  # the same error rank 0 met (same inputs, same code): stay in step for the next job
                log.warning("follower denoise failed: %s: %s", type(e).__name__, e, extra={"model": job.model})
    for adapter in loaded.values():
        adapter.inner.unload()
    leave()
    return 0


def _leading(on_step: StepCallback, group: JobGroup) -> StepCallback:
    def step(done: int, total: int) -> None:
        try:
            on_step(done, total)
        except BaseException:
            _send_flag(group, stop=True)
            raise
        _send_flag(group, stop=False)

    return step


def _following(group: JobGroup) -> StepCallback:
    def step(done: int, total: int) -> None:
        if _receive_flag(group):
            raise FollowerStopped

    return step


def _enable(model: Any, group: JobGroup) -> None:
    """``enable_parallelism`` with Ulysses over every rank. diffusers picks each rank's device as
    ``rank % torch.accelerator.device_count()``, which divides by zero without an accelerator; on CPU the
    model's config resolution is replaced by the same steps with the CPU as the device."""
    from diffusers import ContextParallelConfig

    on_cuda = group.device.startswith("cuda")
    heads = int(getattr(model.config, "num_attention_heads", 0) or 0)
    if not on_cuda and heads % group.size:
        raise ValueError(f"{heads} attention heads do not split {group.size} ways (gloo has no uneven all-gather)")
    config = ContextParallelConfig(ulysses_degree=group.size, ulysses_anything=on_cuda)
    if not on_cuda:
        model._resolve_parallel_config = _cpu_resolver(model, group)
    model.enable_parallelism(config=config)


def _cpu_resolver(model: Any, group: JobGroup) -> Any:
    import torch
    from diffusers import ParallelConfig
    from torch.distributed.device_mesh import init_device_mesh

    parallel_config: Any = ParallelConfig  # diffusers' top-level export is typed loosely

    def resolve(config: Any) -> Any:
        parallel = parallel_config(context_parallel_config=config)
        mesh = init_device_mesh("cpu", config.mesh_shape, mesh_dim_names=config.mesh_dim_names)
        parallel.setup(group.rank, group.size, torch.device("cpu"), mesh=mesh)
        model._parallel_config = parallel
        return parallel

    return resolve


def _require_group() -> JobGroup:
    if _Process.group is None:
        raise ParallelSetupError(
            "models.gpus_per_job > 1 runs only in a worker started by torchrun (it joins the group at start)"
        )
    return _Process.group


def _send(group: JobGroup, order: _Order) -> None:
    import torch.distributed as dist

    dist.broadcast_object_list([order], src=0, group=group.control)


def _receive(group: JobGroup) -> _Order:
    import torch.distributed as dist

    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0, group=group.control)
    order: _Order = box[0]
    return order


def _send_flag(group: JobGroup, *, stop: bool) -> None:
    import torch
    import torch.distributed as dist

    dist.broadcast(torch.tensor([int(stop)]), src=0, group=group.control)


def _receive_flag(group: JobGroup) -> bool:
    import torch
    import torch.distributed as dist

    flag = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(flag, src=0, group=group.control)
    return bool(flag.item())

"""Resumable denoising: checkpoints of a diffusers denoising loop, and an exact resume from one.

diffusers' ``__call__`` cannot start mid-way, and rewriting every pipeline's loop would fork them. A
``DenoiseSession`` keeps the pipeline's own loop and works at its two seams instead:

- **the scheduler's ``step``** is overridden on the scheduler instance. After each real step it remembers
  the returned sample and the scheduler; a checkpoint copies, per ``step`` call of the step (video, then
  audio for LTX-2, whose loop steps a ``deepcopy`` of the scheduler: the override is a bound method, so
  the copy gets its own), the sample and the scheduler's whole state: multistep solvers (UniPC) keep a
  history of model outputs, and a resume that dropped it would diverge;
- **the denoisers' ``forward``** (``transformer``, ``transformer_2``) is wrapped. To resume at step ``k``
  the loop runs from step 1 with the same inputs (text encoding, timesteps and initial noise are cheap
  and deterministic), but while it replays steps ``1..k`` the denoisers return zeros of their output's
  shape without computing anything; at step ``k``'s scheduler step the session puts back the
  checkpoint's samples and scheduler states, and at its step end the generator's state. From step
  ``k + 1`` on the loop is the uninterrupted one, bit for bit.

A checkpoint carries a fingerprint of everything that decides the result (the model's catalog entry,
the resolved job, the scheduler, dtype, library versions, and the family's ``loop_version``: the version
of its denoising loop, which a family bumps whenever a change to its loop makes older checkpoints restore
wrongly); one that does not match, or does not parse, is refused and the job starts over.

A checkpoint that matches is still not trusted until the loop has run past it. At the restore its
contents are checked against the live loop's: the number of scheduler ``step`` calls and of their
outputs, every tensor's shape and dtype, the scheduler state's layout, the generator state's. The replay
ran the real scheduler steps (only the denoisers were skipped), so a fitting checkpoint matches the live
state in everything but the numbers. A mismatch, or any failure while replaying to it and restoring it
(up to the end of the first live step after it), raises ``CheckpointMismatch``: the caller deletes the
checkpoint and runs the job again from step 0 (``worker.pipeline_run``). What the worker does with
checkpoints (where they are stored, how often, what a drain does) is behind ``Checkpoints``: adapters
never touch a store.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import types
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from foundation.core.errors import GenworkerError, Signal, is_out_of_memory
from pipelines.errors import CheckpointCorrupt, CheckpointMismatch, UnsupportedState

if TYPE_CHECKING:
    import torch

    from pipelines.runtime.previews import Previews

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointCorrupt",
    "CheckpointMismatch",
    "Checkpoints",
    "DenoiseCheckpoint",
    "DenoiseSession",
    "SkipOutput",
    "fingerprint",
    "job_fingerprint",
    "weights_signature",
]

log = logging.getLogger("genworker.pipelines.resume")

CHECKPOINT_FORMAT = 1
_MAGIC = b"GWDENOISE1\n"
# Scheduler attributes that are not state: the frozen config, our own ``step`` override, and the noise source of
# a stochastic step (LTX-2.5's ancestral one: the job's generator, whose state a checkpoint holds on its own).
_NOT_STATE = frozenset({"_internal_dict", "config", "step", "noise"})

# What a skipped denoiser returns: (module, positional args, keyword args) -> its output's structure.
SkipOutput = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True)
class DenoiseCheckpoint:
    """What the loop needs to continue after ``step`` of ``total`` steps (1-based, across all stages).

    ``samples[i]``/``schedulers[i]``: the ``i``-th scheduler ``step`` call of that step (everything it
    returned, in order: the sample, and e.g. the predicted clean sample a DPM solver's caller carries to
    the next step; and the scheduler's state after it); ``generator``: the seeded generator's state after the step;
    ``carried``: tensors an adapter keeps across stages (LTX-2's stage-1 output); ``expert``: which expert
    ran the step (Wan 2.2), checked again on resume.
    """

    fingerprint: str
    step: int
    total: int
    samples: list[list[torch.Tensor | None]]
    schedulers: list[dict[str, Any]]
    generator: torch.Tensor | None = None
    carried: dict[str, torch.Tensor] = field(default_factory=dict)
    expert: str | None = None

    def to_bytes(self) -> bytes:
        """A magic line, then ``torch.save`` of plain types and tensors, zlib level 1 (fast; latents are
        noise-like and compress little, the solver history's zeros and the schedule compress well)."""
        import torch

        payload = {
            "format": CHECKPOINT_FORMAT,
            "fingerprint": self.fingerprint,
            "step": self.step,
            "total": self.total,
            "samples": self.samples,
            "schedulers": self.schedulers,
            "generator": self.generator,
            "carried": self.carried,
            "expert": self.expert,
        }
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        return _MAGIC + zlib.compress(buffer.getvalue(), 1)

    @classmethod
    def from_bytes(cls, data: bytes) -> DenoiseCheckpoint:
        """Parse ``to_bytes`` output with ``torch.load(weights_only=True)``: tensors and plain types only, so
        a planted object cannot run code. Raises ``CheckpointCorrupt`` for anything else."""
        import torch

        if not data.startswith(_MAGIC):
            raise CheckpointCorrupt("not a denoising checkpoint (bad header)")
        try:
            raw = zlib.decompress(data[len(_MAGIC) :])
            payload = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
        except Exception as e:  # zlib.error, pickle/unpickling errors, truncated zip: all "unreadable"
            raise CheckpointCorrupt(f"unreadable checkpoint: {type(e).__name__}: {e}") from e
        if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointCorrupt(f"checkpoint format {payload.get('format') if isinstance(payload, dict) else '?'}")
        try:
            checkpoint = cls(
                fingerprint=str(payload["fingerprint"]),
                step=int(payload["step"]),
                total=int(payload["total"]),
                samples=[list(outputs) for outputs in payload["samples"]],
                schedulers=list(payload["schedulers"]),
                generator=payload["generator"],
                carried=dict(payload["carried"]),
                expert=payload["expert"],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointCorrupt(f"incomplete checkpoint: {e}") from e
        if not 1 <= checkpoint.step <= checkpoint.total or len(checkpoint.samples) != len(checkpoint.schedulers):
            raise CheckpointCorrupt(f"inconsistent checkpoint (step {checkpoint.step} of {checkpoint.total})")
        return checkpoint


class Checkpoints(Protocol):
    """The worker's side of checkpointing one attempt (``worker.checkpoints.JobCheckpoints``)."""

    def load(self) -> DenoiseCheckpoint | None:
        """The stored checkpoint of this generation, or None (none, or unreadable: refused and counted)."""
        ...

    def refused(self, reason: str) -> None:
        """A stored checkpoint does not fit this job (``reason``); the job starts over."""
        ...

    def discard(self, detail: str) -> None:
        """The checkpoint ``load`` handed out could not be restored (``CheckpointMismatch``, ``detail``): delete
        it; ``load`` finds none until the next ``save``, so the job's next run starts from step 0."""
        ...

    def resumed(self, step: int, total: int) -> None:
        """The loop continues after ``step`` of ``total`` steps, restored from the checkpoint."""
        ...

    def due(self, step: int, total: int) -> bool:
        """Whether to checkpoint now, after ``step`` (a live step, not a replayed one)."""
        ...

    def save(self, checkpoint: DenoiseCheckpoint) -> None:
        """Store ``checkpoint``, replacing the previous one (may return before it is written)."""
        ...


def fingerprint(**parts: Any) -> str:
    """sha256 over the JSON of everything that decides a denoising result (plus the checkpoint format)."""
    text = json.dumps({"format": CHECKPOINT_FORMAT, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def job_fingerprint(
    spec: Any,
    job: Any,
    pipe: Any,
    *,
    profile: Any,
    device: str,
    loop_version: int,
    scheduler: Any = None,
    **extra: Any,
) -> str:
    """The fingerprint of one job on one pipeline: the model's whole catalog entry (recipes, weights and
    their revision: a catalog change refuses older checkpoints), the weights as loaded
    (``weights_signature``), the resolved job (prompt as used, seed, size, steps, guidance, input image
    digest), the pipeline and scheduler classes and configuration, the runtime profile (dtypes, attention
    backend), the device type, the torch and diffusers versions, and the family's ``loop_version``.
    ``loop_version``: the family's constant (``LOOP_VERSION`` of its module), bumped with every change to
    its denoising loop that changes what a checkpoint holds or how it is restored; a required keyword, so a
    new family names one. During a rolling upgrade a worker then refuses another version's checkpoints.
    ``scheduler``: the one the job starts from when it is not ``pipe.scheduler`` (an adapter that swaps
    schedulers between stages names its base one, so the fingerprint does not depend on the last job)."""
    import diffusers
    import torch

    scheduler = scheduler if scheduler is not None else pipe.scheduler

    return fingerprint(
        model=spec.model_dump(mode="json", exclude={"checkpoints"}),  # the cadence does not change results
        job=job.model_dump(mode="json"),
        profile=profile.model_dump(mode="json"),
        pipeline=type(pipe).__name__,
        scheduler=[type(scheduler).__name__, dict(scheduler.config)],
        device=torch.device(device).type,
        loop=loop_version,
        torch=torch.__version__,
        diffusers=diffusers.__version__,
        weights=weights_signature(pipe),
        **extra,
    )


def weights_signature(pipe: Any, *, per_end: int = 4, values: int = 1024) -> str:
    """A digest of the denoisers' weights as loaded: the first ``values`` numbers of their first and last
    ``per_end`` parameters (names, shapes, dtypes and values). Cheap at any model size, and it tells a
    re-uploaded or differently quantized checkpoint behind the same hub id or path from the one a
    checkpoint was taken with, where the catalog's weights id and revision alone would not."""
    import torch

    digest = hashlib.sha256()
    for name in ("transformer", "transformer_2"):
        module = getattr(pipe, name, None)
        if module is None:
            continue
        params = list(module.named_parameters())
        for param_name, param in params[:per_end] + params[-per_end:]:
            digest.update(f"{name}.{param_name}:{tuple(param.shape)}:{param.dtype}".encode())
            if not param.is_meta:  # sequential offload keeps weights off the module: shapes only then
                digest.update(param.detach().flatten()[:values].to("cpu", torch.float32).numpy().tobytes())
    return digest.hexdigest()


class DenoiseSession:
    """One job's denoising, across its pipeline calls (stages): step counting, checkpoints and resume.

    Use: ``callback`` as every call's ``callback_on_step_end``, each call inside ``running(pipe)``. Without
    ``checkpoints`` it only reports steps. ``fingerprint`` computes ``job_fingerprint`` for this job.
    ``previews``: a live preview of the loop's latents when one is due (``pipelines.runtime.previews``), before
    the step is reported; ``preview_latents`` finds them in the callback's tensors as (batch, channels, frames,
    height, width), or None when it cannot (by default: ``latents`` when it has that shape).
    """

    def __init__(
        self,
        on_step: Callable[[int, int], None],
        *,
        total: int,
        checkpoints: Checkpoints | None = None,
        fingerprint: Callable[[], str] = lambda: "",
        generator: torch.Generator | None = None,
        skip_output: SkipOutput | None = None,
        expert: Callable[[Any, Any], str | None] | None = None,
        previews: Previews | None = None,
        preview_latents: Callable[[dict[str, Any]], torch.Tensor | None] | None = None,
    ) -> None:
        self.on_step = on_step
        self._previews = previews
        self._preview_latents = preview_latents or _video_latents
        self.total = total
        self.done = 0
        self._checkpoints = checkpoints
        # Computed only with checkpoints (it reads a few weights back from the device).
        self._fingerprint = fingerprint() if checkpoints is not None else ""
        self._generator = generator
        self._skip_output = skip_output
        self._expert = expert
        self._calls: list[tuple[Any, Any]] = []  # (scheduler, its outputs) of each step() call of the step
        self._carried: dict[str, torch.Tensor] = {}
        self.resume_from: DenoiseCheckpoint | None = None
        if checkpoints is not None:
            self.resume_from = self._usable(checkpoints.load())

    # ------------------------------------------------------------------------------------------ resume

    def _usable(self, checkpoint: DenoiseCheckpoint | None) -> DenoiseCheckpoint | None:
        if checkpoint is None or self._checkpoints is None:
            return None
        reason = None
        if checkpoint.fingerprint != self._fingerprint:
            reason = "fingerprint"  # another recipe, catalog entry, prompt, seed, library version...
        elif checkpoint.total != self.total:
            reason = "steps"
        if reason is not None:
            self._checkpoints.refused(reason)
            return None
        return checkpoint

    @property
    def resume_step(self) -> int:
        """The step the loop restores (0: starts from the beginning)."""
        return self.resume_from.step if self.resume_from is not None else 0

    @property
    def replaying(self) -> bool:
        """Whether the step in flight is one being replayed (denoisers skipped, its outputs restored)."""
        return self.done + 1 <= self.resume_step

    def carried(self, name: str) -> torch.Tensor | None:
        """A tensor ``carry`` kept in the checkpoint being resumed (None when there is none)."""
        return self.resume_from.carried.get(name) if self.resume_from is not None else None

    def carry(self, **tensors: torch.Tensor) -> None:
        """Keep ``tensors`` in every later checkpoint (e.g. a finished stage's output a later stage needs)."""
        if self._checkpoints is None:
            return  # no checkpoints: no host copies
        self._carried.update({name: _detached(t) for name, t in tensors.items()})

    @contextmanager
    def restoring(self) -> Iterator[None]:
        """Around work that uses the checkpoint before a live step after it confirmed it (the pipeline calls
        that replay to it; an adapter's use of a tensor it ``carried``): a failure there other than ours
        (cancel, drain, a queue error) or running out of memory is the checkpoint's, raised as
        ``CheckpointMismatch``. Without a checkpoint being restored it changes nothing."""
        try:
            yield
        except CheckpointCorrupt:
            raise
        except Exception as e:
            if not self._unconfirmed or isinstance(e, GenworkerError | Signal) or is_out_of_memory(e):
                raise
            raise CheckpointMismatch(
                f"resuming from step {self.resume_step} failed at step {self.done + 1}: {type(e).__name__}: {e}"
            ) from e

    @property
    def _unconfirmed(self) -> bool:
        """A checkpoint is being resumed and no live step after it has completed yet."""
        return self.resume_from is not None and self.done <= self.resume_step

    def skip_steps(self, steps: int) -> None:
        """Count ``steps`` steps (a whole stage) as done without running them: a resume past that stage."""
        if self.done + steps >= self.resume_step:
            raise ValueError(f"cannot skip to step {self.done + steps}: the checkpoint is at {self.resume_step}")
        for _ in range(steps):
            self.done += 1
            self.on_step(self.done, self.total)

    # ------------------------------------------------------------------------------------------ seams

    @contextmanager
    def running(self, pipe: Any, denoisers: Sequence[str] = ("transformer", "transformer_2")) -> Iterator[None]:
        """Around one pipeline call: the scheduler ``step`` override and, while replaying, skipped denoisers."""
        if self._checkpoints is None:
            yield
            return
        scheduler = pipe.scheduler
        original = type(scheduler).step
        session = self

        def step(this: Any, model_output: Any, timestep: Any, sample: Any, *args: Any, **kwargs: Any) -> Any:
            return session._after_step(this, original(this, model_output, timestep, sample, *args, **kwargs))

        scheduler.step = types.MethodType(step, scheduler)
        restore: list[Callable[[], None]] = [lambda: scheduler.__dict__.pop("step", None)]
        if self.resume_step > self.done:
            for name in denoisers:
                module = getattr(pipe, name, None)
                if module is not None:
                    restore.append(self._skip_while_replaying(module))
        try:
            with self.restoring():
                yield
        finally:
            for undo in reversed(restore):
                undo()

    def _skip_while_replaying(self, module: Any) -> Callable[[], None]:
        """Wrap ``module.forward``: zeros shaped like its output while replaying, the real forward after.

        Without a ``skip_output`` the first replayed call of each input shape runs the real forward once to
        learn the output's structure (one step's compute, for a family that did not spell its shape out)."""
        had_own = "forward" in module.__dict__
        previous = module.forward
        skip_output = self._skip_output
        learned: dict[tuple[Any, ...], Any] = {}

        def forward(*args: Any, **kwargs: Any) -> Any:
            if not self.replaying:
                return previous(*args, **kwargs)
            if skip_output is not None:
                return skip_output(module, args, kwargs)
            key = _shapes(args, kwargs)
            if key not in learned:
                learned[key] = previous(*args, **kwargs)
            return _zeros_like(learned[key])

        module.forward = forward

        def undo() -> None:
            if had_own:
                module.forward = previous
            else:
                module.__dict__.pop("forward", None)

        return undo

    def _after_step(self, scheduler: Any, result: Any) -> Any:
        """After a scheduler ``step``: restore the checkpoint at the resume step, else remember its outputs."""
        index = len(self._calls)
        outputs = list(result) if isinstance(result, tuple) else list(result.values())
        checkpoint = self.resume_from
        if checkpoint is not None and self.done + 1 == checkpoint.step:
            _check_fits(checkpoint, index, outputs, scheduler)
            sample = outputs[0]
            _restore_state(scheduler, checkpoint.schedulers[index], device=sample.device)
            outputs = [
                saved.to(now.device) if saved is not None else now
                for saved, now in zip(checkpoint.samples[index], outputs, strict=True)
            ]
            if isinstance(result, tuple):
                result = tuple(outputs)
            else:
                for key, value in zip(list(result.keys()), outputs, strict=True):
                    result[key] = value
        self._calls.append((scheduler, outputs))
        return result

    def callback(self, pipe: Any, index: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        """``callback_on_step_end``: restore or checkpoint, then report the step (its raise stops the loop)."""
        self.done += 1
        calls, self._calls = self._calls, []
        checkpoint = self.resume_from
        expert = self._expert(pipe, timestep) if self._expert is not None else None
        if checkpoint is not None and self.done == checkpoint.step:
            if len(calls) != len(checkpoint.samples):
                raise CheckpointMismatch(
                    f"step {self.done}: {len(calls)} scheduler step(s), the checkpoint has {len(checkpoint.samples)}"
                )
            if expert != checkpoint.expert:
                raise CheckpointMismatch(
                    f"resumed at step {self.done} on expert {expert}, checkpointed on {checkpoint.expert}"
                )
            self._restore_generator(checkpoint.generator)
            assert self._checkpoints is not None
            self._checkpoints.resumed(self.done, self.total)
        elif (
            self._checkpoints is not None
            and self.done > self.resume_step
            and self._checkpoints.due(self.done, self.total)
        ):
            self._save(calls, expert)
        self._preview(tensors)
        self.on_step(self.done, self.total)
        return tensors

    def _preview(self, tensors: dict[str, Any]) -> None:
        """Render a preview of this step's latents when one is due (never of a step being replayed)."""
        previews = self._previews
        if previews is None or self.done < self.resume_step or not previews.due(self.done, self.total):
            return
        latents = self._preview_latents(tensors)
        if latents is not None:
            previews.show(self.done, self.total, latents)

    def _restore_generator(self, state: torch.Tensor | None) -> None:
        """The generator as it was after the checkpoint's step; its state must be one of this generator's."""
        if self._generator is None:
            if state is not None:
                raise CheckpointMismatch("the checkpoint carries a generator state; this loop has no generator")
            return
        live = self._generator.get_state()
        if state is None or _layout(state) != _layout(live):
            found = "none" if state is None else _layout(state)
            raise CheckpointMismatch(f"generator state {found}, this loop's is {_layout(live)}")
        try:
            self._generator.set_state(state)
        except (RuntimeError, ValueError) as e:  # the right size, not a valid state
            raise CheckpointMismatch(f"generator state refused: {e}") from e

    def _save(self, calls: list[tuple[Any, Any]], expert: str | None) -> None:
        assert self._checkpoints is not None
        try:
            checkpoint = DenoiseCheckpoint(
                fingerprint=self._fingerprint,
                step=self.done,
                total=self.total,
                samples=[[_detached(t) if _is_tensor(t) else None for t in outputs] for _, outputs in calls],
                schedulers=[_scheduler_state(scheduler) for scheduler, _ in calls],
                generator=self._generator.get_state() if self._generator is not None else None,
                carried=dict(self._carried),
                expert=expert,
            )
        except UnsupportedState as e:
            log.warning("no checkpoint for this job: %s", e)
            self._checkpoints = None  # the job runs on without them
            return
        self._checkpoints.save(checkpoint)


# ---------------------------------------------------------------------------------------- checks


def _video_latents(tensors: dict[str, Any]) -> torch.Tensor | None:
    """The callback's ``latents`` when shaped (batch, channels, frames, height, width), else None (packed)."""
    latents = tensors.get("latents")
    if latents is None or not _is_tensor(latents) or latents.ndim != 5:
        return None
    tensor: torch.Tensor = latents
    return tensor


def _check_fits(checkpoint: DenoiseCheckpoint, index: int, outputs: list[Any], scheduler: Any) -> None:
    """The ``index``-th scheduler step of the checkpoint's step, against the live one about to be replaced:
    as many outputs, each of the same shape and dtype (or both not tensors), and the scheduler's state laid
    out alike (the same attributes, containers of the same lengths, tensors of the same shapes and dtypes,
    scalars of the same types). ``CheckpointMismatch`` names the first difference."""
    step = checkpoint.step
    if index >= len(checkpoint.samples):
        raise CheckpointMismatch(f"step {step}: scheduler step {index + 1} is not in the checkpoint")
    saved = checkpoint.samples[index]
    if len(saved) != len(outputs):
        raise CheckpointMismatch(f"step {step}: {len(saved)} scheduler output(s) saved, the loop makes {len(outputs)}")
    for i, (old, now) in enumerate(zip(saved, outputs, strict=True)):
        want = _layout(now if _is_tensor(now) else None)  # a non-tensor output is saved as None
        if _layout(old) != want:
            raise CheckpointMismatch(f"step {step}: output {i} is {_layout(old)}, the loop's is {want}")
    state = checkpoint.schedulers[index]
    if not isinstance(state, dict):
        raise CheckpointMismatch(f"step {step}: the scheduler state is a {type(state).__name__}")
    live = {name: value for name, value in vars(scheduler).items() if name not in _NOT_STATE}
    if set(state) != set(live):
        raise CheckpointMismatch(f"step {step}: scheduler attributes differ: {sorted(set(state) ^ set(live))}")
    for name, value in live.items():
        if not _alike(_layout(state[name]), _layout(value)):
            raise CheckpointMismatch(
                f"step {step}: scheduler {name} is {_layout(state[name])}, the loop's is {_layout(value)}"
            )


def _alike(saved: Any, live: Any) -> bool:
    """Two scheduler state layouts alike, where a None on either side matches anything: some state is not
    reset by ``set_timesteps`` and keeps a previous job's values in slots no step reads (UniPC's
    ``timestep_list``), so whether a slot holds None depends on the scheduler's history, not on the job."""
    none = _layout(None)
    if none in (saved, live):
        return True
    if isinstance(saved, tuple) and isinstance(live, tuple) and saved[0] == live[0] and saved[0] in ("list", "tuple"):
        items, now = saved[1], live[1]
        return len(items) == len(now) and all(_alike(a, b) for a, b in zip(items, now, strict=True))
    return bool(saved == live)


def _layout(value: Any) -> Any:
    """What a restore needs alike in a checkpoint and the live loop: a value's structure, each tensor's (or
    array's) shape and dtype and each scalar's type, never its numbers. Reads live values and the frozen
    form ``_freeze`` gives them alike."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.shape, str(value.dtype))
    if isinstance(value, np.generic):
        return _layout(value.item())
    if isinstance(value, dict):  # frozen: {"tensor", "cpu"}, {"ndarray"} or {"tuple"}
        if "tensor" in value:
            return _layout(value["tensor"])
        if "ndarray" in value and isinstance(value["ndarray"], torch.Tensor):
            array = value["ndarray"]
            return ("ndarray", tuple(array.shape), str(array.numpy().dtype))
        if "tuple" in value:
            return _layout(tuple(value["tuple"]))
        return ("dict", sorted(value))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_layout(v) for v in value))
    return type(value).__name__


# ---------------------------------------------------------------------------------------- state copies


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _shapes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The input tensors' shapes, as the key of an output structure learned once per shape."""
    named = [*enumerate(args), *sorted(kwargs.items())]
    return tuple((name, tuple(v.shape)) for name, v in named if _is_tensor(v))


def _zeros_like(value: Any) -> Any:
    """Fresh zeros in ``value``'s structure (tensors, tuples and lists of them, diffusers' output classes)."""
    import torch

    if isinstance(value, torch.Tensor):
        return torch.zeros_like(value)
    if isinstance(value, tuple | list):
        return type(value)(_zeros_like(v) for v in value)
    if isinstance(value, dict):  # BaseOutput is an OrderedDict dataclass
        return type(value)(**{k: _zeros_like(v) for k, v in value.items()})
    return value


def _detached(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy (the device keeps computing; the copy is what gets serialized)."""
    return tensor.detach().to("cpu", copy=True)


def _scheduler_state(scheduler: Any) -> dict[str, Any]:
    """The scheduler's instance state (config excluded), as CPU tensors and plain values."""
    return {
        name: _freeze(value, f"{type(scheduler).__name__}.{name}")
        for name, value in vars(scheduler).items()
        if name not in _NOT_STATE
    }


def _freeze(value: Any, where: str) -> Any:
    """Tensors as ``{"tensor", "cpu"}`` (where it lived: CPU schedules stay on the CPU), NumPy arrays as
    ``{"ndarray"}``, containers recursively; anything ``torch.load(weights_only=True)`` cannot read back is
    refused."""
    import numpy as np
    import torch

    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.Tensor):
        return {"tensor": _detached(value), "cpu": value.device.type == "cpu"}
    if isinstance(value, np.ndarray):
        return {"ndarray": torch.from_numpy(np.array(value, copy=True))}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        items = [_freeze(v, where) for v in value]
        return items if isinstance(value, list) else {"tuple": items}
    raise UnsupportedState(f"{where} is a {type(value).__name__}")


def _thaw(value: Any, device: Any) -> Any:
    if isinstance(value, dict):
        if "tensor" in value:
            tensor = value["tensor"]
            return tensor if value["cpu"] else tensor.to(device)
        if "ndarray" in value:
            return value["ndarray"].numpy()
        if "tuple" in value:
            return tuple(_thaw(v, device) for v in value["tuple"])
    if isinstance(value, list):
        return [_thaw(v, device) for v in value]
    return value


def _restore_state(scheduler: Any, state: dict[str, Any], *, device: Any) -> None:
    for name, value in state.items():
        setattr(scheduler, name, _thaw(value, device))

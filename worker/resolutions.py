"""A claimed record re-checked and resolved against this worker's catalog (``Resolutions``).

Before any model runs, the worker re-checks what the API accepted: the record as a strict create
request (``rebuild_request``), resolved against its own catalog (``resolve``), which may differ from
the API's. Of what that yields, only the prompt and the seed differ between records of one model, mode,
variant and parameter set, and the prompt's length against the model's limit is the only check that
reads either. So the first record of a parameter set is resolved in full, and later ones take its
resolved job with their own prompt and seed, after that check: on an idle worker, the two
validations it skips are cold code right after the wake-up (what that buys the daemon's pick-up is
measured in docs/benchmarks.md with ``scripts/bench_worker.py``'s paired A/B). Image jobs are resolved
in full each time (an ``auto`` ratio reads the image); a record the catalog refuses is never kept, so
its next twin is refused alike.
"""

from __future__ import annotations

import hashlib

from foundation.core.catalog import Catalog, ModelSpec
from foundation.core.contract import MAX_SEED, CreateRequest, GenerationRecord, parse_create_request
from foundation.core.resolve import ResolvedJob, check_prompt, resolve
from foundation.queue.base import Claim

__all__ = ["Resolutions", "job_seed", "rebuild_request"]

# Parameter sets kept (a few per model in practice: resolutions x durations x ratios x variants).
_MAX_KEPT = 1024


def job_seed(record: GenerationRecord) -> int:
    """The record's seed; one without gets a seed derived from its id, so every attempt renders the same video."""
    if record.parameters.seed is not None:
        return record.parameters.seed
    return int.from_bytes(hashlib.sha256(record.id.encode()).digest()[:4]) % (MAX_SEED + 1)


def rebuild_request(claim: Claim) -> CreateRequest:
    """The record as a strict create request, so a worker re-checks what the API accepted (with its ``job_seed``)."""
    record = claim.record
    params = record.parameters.model_dump(exclude_none=True)
    params["seed"] = job_seed(record)
    body = {
        "model": record.model,
        "mode": record.mode,
        "variant": record.variant,
        "parameters": params,
        "input": {"prompt": record.input.prompt},
    }
    return parse_create_request(body)


def parameter_set(record: GenerationRecord) -> tuple[object, ...]:
    """What a record's resolution depends on besides its prompt and seed: model, mode, variant and every
    parameter but the seed (all of them, so a parameter added later is part of it without a change here)."""
    params = tuple((name, value) for name, value in record.parameters.__dict__.items() if name != "seed")
    return (record.model, record.mode, record.variant, params)


class Resolutions:
    """``resolve(claim)``: the job a claimed record runs as, and its model's spec; raises the coded
    ``RequestRejected`` the full resolution raises."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._kept: dict[tuple[object, ...], ResolvedJob] = {}

    def resolve(self, claim: Claim) -> tuple[ResolvedJob, ModelSpec]:
        record = claim.record
        key = parameter_set(record) if record.input.image is None else None
        kept = self._kept.get(key) if key is not None else None
        if kept is None:
            job, _hold = resolve(rebuild_request(claim), self._catalog, image=record.input.image)
            if key is not None:
                if len(self._kept) >= _MAX_KEPT:
                    self._kept.clear()
                self._kept[key] = job
        else:
            # pipeline_kwargs is the one mutable field: each job gets its own copy, as resolve() gives.
            own = {
                "prompt": record.input.prompt,
                "seed": job_seed(record),
                "pipeline_kwargs": dict(kept.pipeline_kwargs),
            }
            job = kept.model_copy(update=own)
        spec = self._catalog.get(job.model)
        assert spec is not None  # resolve() rejects unknown models, and only its jobs are kept
        if kept is not None:
            check_prompt(spec, record.input.prompt)
        return job, spec

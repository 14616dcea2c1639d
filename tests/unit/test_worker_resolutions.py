"""``Resolutions``: a record resolved from its parameter set's kept job is exactly what the full
re-check (``rebuild_request`` + ``resolve``) makes of it, refusals included."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from foundation.core.catalog import load_catalog
from foundation.core.contract import GenerationRecord, Parameters, StoredImage
from foundation.core.errors import RequestRejected
from foundation.core.resolve import ResolvedJob, resolve
from foundation.queue.base import Claim
from tests.integration.worker_harness import make_record
from worker.resolutions import Resolutions, parameter_set, rebuild_request

CATALOG = load_catalog()


def claim_of(record: GenerationRecord) -> Claim:
    return Claim(job_id=record.id, model=record.model, attempt=1, record=record)


def full(record: GenerationRecord) -> ResolvedJob:
    return resolve(rebuild_request(claim_of(record)), CATALOG, image=record.input.image)[0]


def with_params(record: GenerationRecord, **changes: Any) -> GenerationRecord:
    return record.model_copy(update={"parameters": record.parameters.model_copy(update=changes)})


def records() -> list[GenerationRecord]:
    """Records of the tiny models over their offered choices, each parameter set twice (two prompts, two
    seeds, one without a seed), so the second of each is resolved from the kept job."""
    out = []
    for model in ("tiny-wan", "tiny-ltx2"):
        spec = CATALOG.get(model)
        assert spec is not None
        for resolution, duration, ratio in itertools.product(spec.resolutions, spec.durations[:2], spec.ratios[:2]):
            for seed, prompt in ((7, "a lighthouse at dusk"), (None, "waves over rocks, slow pan")):
                record = make_record(
                    CATALOG, model, prompt=prompt, resolution=resolution, duration_seconds=duration, ratio=ratio
                )
                out.append(with_params(record, seed=seed))
    return out


def test_every_record_resolves_as_the_full_re_check_resolves_it() -> None:
    resolutions = Resolutions(CATALOG)
    batch = records()
    assert len({parameter_set(r) for r in batch}) == len(batch) // 2  # each set comes twice: once kept, once served
    for record in batch:
        job, spec = resolutions.resolve(claim_of(record))
        assert job == full(record)
        assert spec.id == record.model


def test_a_kept_job_lends_each_record_its_own_prompt_seed_and_pipeline_kwargs() -> None:
    resolutions = Resolutions(CATALOG)
    first = make_record(CATALOG, "tiny-wan", prompt="first prompt")
    second = with_params(make_record(CATALOG, "tiny-wan", prompt="second prompt"), seed=None)
    a, _ = resolutions.resolve(claim_of(first))
    b, _ = resolutions.resolve(claim_of(second))
    assert parameter_set(first) == parameter_set(second)
    assert (a.prompt, a.seed) == ("first prompt", 7)
    assert b.prompt == "second prompt" and b.seed == full(second).seed != 7  # derived from its own id
    assert a.pipeline_kwargs is not b.pipeline_kwargs  # an adapter changing one job's kwargs changes no other


def test_a_prompt_too_long_for_the_model_is_refused_from_a_kept_job_as_in_full() -> None:
    resolutions = Resolutions(CATALOG)
    resolutions.resolve(claim_of(make_record(CATALOG, "tiny-wan")))  # the parameter set is kept
    spec = CATALOG.get("tiny-wan")
    assert spec is not None
    long = make_record(CATALOG, "tiny-wan")
    long = long.model_copy(
        update={"input": long.input.model_copy(update={"prompt": "x" * (spec.prompt_max_chars + 1)})}
    )
    with pytest.raises(RequestRejected) as kept:
        resolutions.resolve(claim_of(long))
    with pytest.raises(RequestRejected) as whole:
        full(long)
    assert (kept.value.code, kept.value.param, str(kept.value)) == (
        whole.value.code,
        whole.value.param,
        str(whole.value),
    )


def test_a_refused_parameter_set_is_never_kept() -> None:
    resolutions = Resolutions(CATALOG)
    refused = with_params(make_record(CATALOG, "tiny-wan"), audio=True)  # tiny-wan has no audio
    for _ in range(2):
        with pytest.raises(RequestRejected):
            resolutions.resolve(claim_of(refused))


def test_every_parameter_but_the_seed_tells_parameter_sets_apart() -> None:
    record = make_record(CATALOG, "tiny-wan", negative_prompt="blurry")
    other_value = {
        "resolution": "240p",
        "duration_seconds": 3,
        "ratio": "9:16",
        "audio": True,
        "prompt_extend": True,
        "negative_prompt": "grainy",
        "preview": False,
    }
    assert set(other_value) == set(Parameters.model_fields) - {"seed"}  # a new parameter must be listed here
    for name, value in other_value.items():
        assert getattr(record.parameters, name) != value
        assert parameter_set(with_params(record, **{name: value})) != parameter_set(record), name
    assert parameter_set(with_params(record, seed=99)) == parameter_set(record)
    for field, value in (("model", "tiny-ltx2"), ("mode", "image_to_video"), ("variant", "fast")):
        assert parameter_set(record.model_copy(update={field: value})) != parameter_set(record), field


def test_an_image_job_is_resolved_in_full_each_time() -> None:
    resolutions = Resolutions(CATALOG)
    image = StoredImage(key="k", content_type="image/png", bytes=1, sha256="0" * 64, width=640, height=360)
    record = make_record(CATALOG, "tiny-wan")
    record = record.model_copy(update={"input": record.input.model_copy(update={"image": image})})
    job, _ = resolutions.resolve(claim_of(record))
    assert job == full(record) and job.image == image
    assert resolutions._kept == {}

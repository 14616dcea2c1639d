"""The compile warm-up's plan (``pipelines.runtime.compile``) on every tiny model, without compiling: each graph kind
of each mode runs at a set of shapes that varies every latent dimension; a warm-up job of each two-expert kind runs
both experts and stops (counted by forward hooks of our own), and one of each image mode runs with its blank image.
The compiled run, with no compile in a job afterwards, is tests/long/test_compile.py (make test-long)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from foundation.core.catalog import Catalog, load_catalog, mode_inputs
from pipelines.runtime.cache import ModelCache
from pipelines.runtime.compile import GraphKind, WarmupJob, graph_kind, run_warmup_job, warmup_plan

CATALOG = load_catalog()
TINY = [spec.id for spec in CATALOG.models.values() if spec.tiny]


def _kinds(catalog: Catalog, model: str) -> dict[GraphKind, list[str]]:
    """Every variant's graph kind (by mode), with the variants of each."""
    kinds: dict[GraphKind, list[str]] = defaultdict(list)
    for mode, mode_spec in catalog.models[model].modes.items():
        for name, variant in mode_spec.variants.items():
            kinds[graph_kind(mode, name, variant)].append(f"{mode}/{name}")
    return kinds


@pytest.mark.parametrize("model", TINY)
def test_every_graph_kind_runs_at_shapes_that_vary_each_latent_dimension(catalog: Catalog, model: str) -> None:
    plan = warmup_plan(catalog.models[model], catalog)
    shapes: dict[GraphKind, list[tuple[int, int, int]]] = defaultdict(list)
    for item in plan:
        shapes[item.kind].append((item.job.gen_width, item.job.gen_height, item.job.num_frames))
    assert set(shapes) == set(_kinds(catalog, model))
    for kind, seen in shapes.items():
        assert len(set(seen)) == len(seen), kind  # no shape twice
        for axis in range(3):
            assert len({shape[axis] for shape in seen}) >= 2, (kind, axis)


def test_variants_that_differ_only_in_numbers_share_a_kind(catalog: Catalog) -> None:
    """Steps, shift, sampler and guidance strength change no graph: wan2.2-t2v-a14b's standard and fast share one
    kind; its cached and distilled (a LoRA per expert) are kinds of their own; LTX-2's distilled recipe too."""
    kinds = _kinds(catalog, "wan2.2-t2v-a14b")
    assert sorted(kinds.values()) == [
        ["text_to_video/cached"],
        ["text_to_video/distilled"],
        ["text_to_video/standard", "text_to_video/fast"],
    ]
    assert all(kind.two_experts for kind in kinds)
    assert len(_kinds(catalog, "ltx-2")) == 4  # two modes x (standard, distilled)


def test_variants_a_worker_does_not_serve_are_left_out(catalog: Catalog) -> None:
    spec = catalog.models["tiny-wan"]
    plan = warmup_plan(spec, catalog, left_out=["text_to_video/distilled"])
    assert {item.kind.lora for item in plan} == {None}
    assert {item.job.variant for item in warmup_plan(spec, catalog)} >= {"distilled"}


# What the warm-up adds to a denoise: a two-expert kind searches the fewest steps of its own schedule that reach the
# low-noise expert and stops once it ran (each such kind runs: their schedules differ), and an image mode gets a blank
# image of the generation size (one kind per image mode runs). A text kind of a one-denoiser model is the 1-step
# denoise of its variant that the variant tests run already, so it is left to them and to the plan checks above:
# this keeps the check to seconds of make test.
def _size(item: WarmupJob) -> int:
    return item.job.gen_width * item.job.gen_height * item.job.num_frames


def _runs(catalog: Catalog, model: str) -> dict[GraphKind, WarmupJob]:
    """The kinds run here, each at its smallest shape."""
    smallest: dict[GraphKind, WarmupJob] = {}
    for item in warmup_plan(catalog.models[model], catalog):
        if item.kind not in smallest or _size(item) < _size(smallest[item.kind]):
            smallest[item.kind] = item
    runs = {kind: item for kind, item in smallest.items() if kind.two_experts}
    for mode in catalog.models[model].modes:
        if "image" in mode_inputs(mode):
            kind = next(kind for kind in smallest if kind.mode == mode)
            runs.setdefault(kind, smallest[kind])
    return runs


RUN = [model for model in TINY if _runs(CATALOG, model)]


@pytest.mark.parametrize("model", RUN)
def test_each_kind_runs_every_denoiser_it_has(model_cache: ModelCache, catalog: Catalog, model: str) -> None:
    """One warm-up job per kind of ``_runs``, its denoiser calls counted: every kind runs the transformer, and a
    two-expert kind the low-noise expert too, at the fewest steps of its own schedule (stopped once it ran)."""
    adapter = model_cache.get(catalog.models[model])
    pipe = adapter.pipe  # type: ignore[attr-defined]
    denoisers = {name: m for name in ("transformer", "transformer_2") if (m := getattr(pipe, name, None)) is not None}
    calls: dict[str, int] = dict.fromkeys(denoisers, 0)
    handles = [
        m.register_forward_pre_hook(lambda *_, n=name: calls.__setitem__(n, calls[n] + 1))
        for name, m in denoisers.items()
    ]
    ran: dict[GraphKind, dict[str, int]] = {}
    try:
        for kind, item in _runs(catalog, model).items():
            calls.update(dict.fromkeys(calls, 0))
            run_warmup_job(adapter, item)
            ran[kind] = {name: count for name, count in calls.items() if count}
    finally:
        for handle in handles:
            handle.remove()
    for kind, denoised in ran.items():
        expected = set(denoisers) if kind.two_experts else {"transformer"}
        assert set(denoised) == expected, (_kinds(catalog, model)[kind], denoised)
        if kind.two_experts:  # stopped after the one step the low-noise expert ran (a second call with CFG)
            assert denoised["transformer_2"] <= 2, (_kinds(catalog, model)[kind], denoised)


def test_every_two_expert_kind_and_image_mode_is_run(catalog: Catalog) -> None:
    two_experts = {m for m in TINY if any(kind.two_experts for kind in _kinds(catalog, m))}
    assert two_experts == {"tiny-wan-a14b", "tiny-wan-i2v-a14b"}
    for model in two_experts:
        assert set(_runs(catalog, model)) == set(_kinds(catalog, model))
    assert {(m, k.mode) for m in RUN for k in _runs(catalog, m) if not k.two_experts} == {
        (m, mode) for m in TINY if m not in two_experts for mode in catalog.models[m].modes if mode == "image_to_video"
    }

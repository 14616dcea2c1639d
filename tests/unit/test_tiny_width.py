"""Every real entry of the shipped catalog has a tiny stand-in (a tiny entry's ``stands_for``), and each stand-in is
as wide as each real entry it stands for: the same modes, the same variant names with the same kind of recipe
(LoRA, cache, sampler, two experts, pipeline options), every duration and ratio, the same audio, the same prompt
extension and the same two-stage recipe. So the tests that run a tiny model run every choice a client has on the
real one. Sizes (144p/240p), fps, steps and guidance strengths are the tiny model's own. A stand-in may offer more
than a real entry (tiny-wan-i2v-a14b's distilled recipe has no real twin yet): the check is one way."""

from __future__ import annotations

from typing import Any

import pytest

from foundation.core.catalog import Catalog, ModelSpec, VariantSpec, default_catalog_path, load_catalog

CATALOG = load_catalog(default_catalog_path())
PAIRS = [(real, tiny.id) for tiny in CATALOG.models.values() for real in tiny.stands_for]


def variant_kind(variant: VariantSpec) -> dict[str, Any]:
    """What a variant runs beyond numbers: the code paths a tiny job must take for the real one's."""
    lora = variant.lora
    return {
        "lora": None if lora is None else ("one per expert" if lora.weight_name_2 is not None else "one"),
        "cache": None if variant.cache is None else variant.cache.kind,
        "sampler": None if variant.sampler is None else variant.sampler.model_dump(),
        "two experts": variant.guidance_scale_2 is not None or "boundary_ratio" in variant.pipeline_kwargs,
        "pipeline options": sorted(variant.pipeline_kwargs),
    }


def entry_kind(spec: ModelSpec) -> dict[str, Any]:
    extend = spec.prompt_extend
    return {
        "family": spec.family,
        "adapter": spec.adapter,
        "pipeline": None if spec.diffusers is None else spec.diffusers.pipeline,
        "audio": spec.audio,
        "prompt_extend": None if extend is None else (extend.method, extend.system_prompt),
        "two_stage": spec.two_stage is not None,
        "image_fit": spec.image_fit,
    }


def width_gaps(real: ModelSpec, tiny: ModelSpec) -> list[str]:
    """What ``real`` offers that ``tiny`` does not (empty: as wide)."""
    gaps = [f"{key}: {value!r}" for key, value in entry_kind(real).items() if entry_kind(tiny)[key] != value]
    gaps += [f"duration {d}" for d in real.durations if d not in tiny.durations]
    gaps += [f"ratio {r}" for r in real.ratios if r not in tiny.ratios]
    gaps += [f"resolution {r} is not tiny" for r in tiny.resolutions if r not in ("144p", "240p")]
    for mode, offered in real.modes.items():
        twins = tiny.modes[mode].variants if mode in tiny.modes else {}
        for name, variant in offered.variants.items():
            twin = twins.get(name)
            if twin is None:
                gaps.append(f"{mode}/{name} missing")
            elif variant_kind(twin) != variant_kind(variant):
                gaps.append(f"{mode}/{name}: {variant_kind(twin)} is not {variant_kind(variant)}")
    return gaps


def stand_in_problems(catalog: Catalog) -> list[str]:
    """What breaks "one tiny stand-in per real entry", each said as what to change in the catalog file."""
    pairs = [(real, tiny.id) for tiny in catalog.models.values() for real in tiny.stands_for]
    named = [real for real, _ in pairs]
    problems = []
    for spec in catalog.models.values():
        if spec.tiny or spec.id in named:
            continue
        kin = [m.id for m in catalog.models.values() if m.tiny and m.family == spec.family]
        problems.append(
            f"real entry {spec.id!r} has no tiny stand-in: add {spec.id!r} to `stands_for` of the tiny entry that "
            f"runs its choices on CPU (family {spec.family}: {', '.join(kin) or 'none yet, add one'}); "
            "docs/adding-a-pipeline.md, path 1"
        )
    real_ids = {m.id for m in catalog.models.values() if not m.tiny}
    for real in sorted(set(named)):
        if named.count(real) > 1:
            problems.append(f"{real!r} is named in `stands_for` of {named.count(real)} tiny entries; keep one")
        if real not in real_ids:
            problems.append(f"`stands_for` names {real!r}, which is no real entry")
    problems += [
        f"{m.id!r} has `stands_for` but is not tiny" for m in catalog.models.values() if m.stands_for and not m.tiny
    ]
    return problems


def test_every_real_entry_has_exactly_one_stand_in() -> None:
    """``stands_for`` names real entries only, each once, all of them; only tiny entries carry it."""
    assert stand_in_problems(CATALOG) == []


def test_a_real_entry_without_a_stand_in_is_told_what_to_add() -> None:
    """Path 1 of docs/adding-a-pipeline.md: a new real entry alone fails with the line to add."""
    entry = CATALOG.models["wan2.1-t2v-1.3b"].model_copy(update={"id": "an-entry-without-a-stand-in"})
    problems = stand_in_problems(Catalog(models={**CATALOG.models, entry.id: entry}))
    assert problems == [
        "real entry 'an-entry-without-a-stand-in' has no tiny stand-in: add 'an-entry-without-a-stand-in' to "
        "`stands_for` of the tiny entry that runs its choices on CPU (family wan: tiny-wan, tiny-wan-a14b, "
        "tiny-wan-i2v, tiny-wan-i2v-a14b, tiny-wan-ti2v); docs/adding-a-pipeline.md, path 1"
    ]


@pytest.mark.parametrize(("real", "tiny"), PAIRS, ids=[f"{t}-for-{r}" for r, t in PAIRS])
def test_a_stand_in_is_as_wide_as_its_real_entry(real: str, tiny: str) -> None:
    assert width_gaps(CATALOG.models[real], CATALOG.models[tiny]) == []


def test_the_check_names_each_kind_of_gap() -> None:
    """A stand-in narrowed one way at a time: each gap is named (the check above can fail)."""
    real, tiny = CATALOG.models["wan2.2-t2v-a14b"], CATALOG.models["tiny-wan-a14b"]
    variants = tiny.modes["text_to_video"].variants
    cached, distilled = variants["cached"], variants["distilled"]
    assert cached.cache is not None and distilled.lora is not None

    def narrowed(**update: Any) -> ModelSpec:
        return tiny.model_copy(update=update)

    def with_variants(changed: dict[str, VariantSpec]) -> ModelSpec:
        mode = tiny.modes["text_to_video"].model_copy(update={"variants": changed})
        return narrowed(modes={"text_to_video": mode})

    first_block = cached.model_copy(update={"cache": cached.cache.model_copy(update={"kind": "first_block"})})
    one_lora = distilled.model_copy(update={"lora": distilled.lora.model_copy(update={"weight_name_2": None})})
    no_sampler = distilled.model_copy(update={"sampler": None})
    cases = [
        ("ratio 3:4", narrowed(ratios=tiny.ratios[:-1])),
        ("duration 5", narrowed(durations=tiny.durations[:-1])),
        ("audio", narrowed(audio=True)),
        ("prompt_extend", narrowed(prompt_extend=None)),
        ("resolution 480p is not tiny", narrowed(resolutions=["480p"])),
        ("text_to_video/fast missing", with_variants({k: v for k, v in variants.items() if k != "fast"})),
        ("text_to_video/cached: ", with_variants({**variants, "cached": first_block})),
        ("text_to_video/distilled: ", with_variants({**variants, "distilled": one_lora})),
        ("text_to_video/distilled: ", with_variants({**variants, "distilled": no_sampler})),
    ]
    assert width_gaps(real, tiny) == []
    for gap, spec in cases:
        assert [g for g in width_gaps(real, spec) if g.startswith(gap)], (gap, width_gaps(real, spec))

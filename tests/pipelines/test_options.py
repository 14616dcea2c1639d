"""Per-family options: the catalog's table (``FAMILY_OPTIONS``, checked at load without importing the
adapters) and what each adapter really accepts must not drift apart."""

from __future__ import annotations

import inspect
import typing

import pytest

from foundation.core.catalog import Catalog, ModelSpec
from pipelines.runtime.options import FAMILY_OPTIONS
from pipelines.runtime.registry import adapter_class

# The diffusers pipeline class each family's adapter calls; options it does not apply itself go to it.
# The generic adapter ("diffusers") takes no family-wide options: each entry lists its own, checked against its
# own pipeline class in test_generic.py.
PIPELINES = {"wan": "WanPipeline", "ltx2": "LTX2Pipeline", "diffusers": "HunyuanVideo15Pipeline"}


def test_every_family_has_an_options_entry() -> None:
    families = set(typing.get_args(ModelSpec.model_fields["family"].annotation))
    assert set(FAMILY_OPTIONS) == families == set(PIPELINES)


def test_each_catalog_adapter_accepts_exactly_its_family_options(catalog: Catalog) -> None:
    for spec in catalog.models.values():
        cls = adapter_class(spec.adapter)
        assert cls.options == FAMILY_OPTIONS[spec.family], spec.id


@pytest.mark.parametrize("family", sorted(PIPELINES))
def test_each_option_is_applied_by_the_adapter_or_taken_by_its_pipeline(catalog: Catalog, family: str) -> None:
    import diffusers

    spec = next(s for s in catalog.models.values() if s.family == family)
    cls = adapter_class(spec.adapter)
    pipeline_keywords = set(inspect.signature(getattr(diffusers, PIPELINES[family]).__call__).parameters)
    own: frozenset[str] = getattr(cls, "own_options")  # noqa: B009  (family classes only, not the protocol)
    assert own <= cls.options
    assert cls.options - own <= pipeline_keywords, sorted(cls.options - own - pipeline_keywords)


def test_shipped_variants_use_only_their_family_options(catalog: Catalog) -> None:
    for spec in catalog.models.values():
        for mode in spec.modes.values():
            for name, variant in mode.variants.items():
                assert set(variant.pipeline_kwargs) <= FAMILY_OPTIONS[spec.family], (spec.id, name)

"""Helpers for the pipeline tests: the shipped catalog and resolved jobs built the way the worker builds them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from foundation.core.catalog import Catalog, load_catalog
from foundation.core.contract import CreateRequest
from foundation.core.resolve import ResolvedJob, resolve

MakeJob = Callable[..., ResolvedJob]


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def make_job(catalog: Catalog) -> MakeJob:
    """``make_job("tiny-wan", resolution="144p", seed=1, prompt="...")``: a request resolved against the catalog."""

    def make(
        model: str, *, prompt: str = "a red fox running through snow", variant: str = "standard", **params: Any
    ) -> ResolvedJob:
        params.setdefault("seed", 1)
        request = CreateRequest.model_validate(
            {
                "model": model,
                "mode": "text_to_video",
                "variant": variant,
                "parameters": params,
                "input": {"prompt": prompt},
            }
        )
        job, _hold = resolve(request, catalog)
        return job

    return make

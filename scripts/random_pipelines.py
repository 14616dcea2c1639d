"""The random full-size assembly, kept importable here for the bench scripts: it lives in the package
(``pipelines.simulation.random_pipelines``), where the simulation shares it with them."""

from __future__ import annotations

from pipelines.simulation.random_pipelines import RandomModel, random_adapter, random_variant_loras

__all__ = ["RandomModel", "random_adapter", "random_variant_loras"]

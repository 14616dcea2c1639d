"""The pipeline tests' fixtures (the shipped catalog, resolved jobs) for the long tests too."""

from tests.pipelines.conftest import catalog, make_job

__all__ = ["catalog", "make_job"]

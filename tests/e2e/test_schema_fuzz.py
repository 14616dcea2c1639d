"""Schemathesis fuzzes every operation of ``/v1/openapi.json`` against the live server, with a valid
key: no 5xx, every response (errors included) matches the documented status codes, headers and
schemas, and schema-invalid input is refused with 4xx.

The operations are driven through ``APIOperation.as_strategy`` with hypothesis directly (the lazy
pytest loader of schemathesis 4.32 does not run under pytest 9).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from tests.e2e.conftest import Stack, add_keys, start_stack

OPERATIONS = [
    ("POST", "/v1/generations"),
    ("GET", "/v1/generations"),
    ("GET", "/v1/generations/{generation_id}"),
    ("POST", "/v1/generations/{generation_id}/cancel"),
    ("GET", "/v1/generations/{generation_id}/events"),
    ("GET", "/v1/models"),
]


@pytest.fixture(scope="module")
def fuzz_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A generous rate limit: hypothesis sends hundreds of requests with one key.
    s = start_stack(tmp_path_factory.mktemp("fuzz"), api={"rate_limit_per_s": 10_000, "rate_limit_burst": 10_000})
    add_keys(s)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def api_schema(fuzz_stack: Stack) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{fuzz_stack.base_url}/v1/openapi.json")


def test_every_operation_is_fuzzed(api_schema: schemathesis.BaseSchema) -> None:
    documented = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert documented == set(OPERATIONS)


def test_schema_documents_errors_and_bearer_auth_but_no_422(fuzz_stack: Stack) -> None:
    import httpx

    spec = httpx.get(f"{fuzz_stack.base_url}/v1/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)
            assert {"400", "500", "503"} <= set(responses), (method, path)
            if path != "/v1/models":
                assert operation["security"] == [{"bearerAuth": []}]
                assert {"401", "403", "429"} <= set(responses), (method, path)
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/ErrorBody", (method, path, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def _invalid_on_the_wire(case: schemathesis.Case) -> bool:
    """Whether a negative case's invalid part reaches the server. Two parts never do: a header made invalid
    (this test always sends the valid key in ``Authorization``), and an extra query property whose value
    serializes to nothing (``None`` or an empty list: the client leaves it out of the URL)."""
    negative = {loc for loc, info in case.meta.components.items() if info.mode.is_negative} if case.meta else set()
    negative.discard(ParameterLocation.HEADER)
    if negative == {ParameterLocation.QUERY}:
        return not any(value is None or value == [] for value in (case.query or {}).values())
    return bool(negative)


# Negative cases need an input to make invalid; GET /v1/models takes none.
CASES = [
    (m, p, mode) for m, p in OPERATIONS for mode in GenerationMode if not (p == "/v1/models" and mode == "negative")
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {mode.value}" for m, p, mode in CASES])
def test_operation_conforms_to_the_schema(
    api_schema: schemathesis.BaseSchema, fuzz_stack: Stack, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]
    auth = {"Authorization": f"Bearer {fuzz_stack.tokens['alpha']}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    # Derandomized: the same examples every run (a schema change reshuffles them). A negative case whose
    # invalid part does not reach the server is checked for everything but its refusal (_invalid_on_the_wire).
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    def check(case: schemathesis.Case) -> None:
        # A schema-valid body may still name a model the catalog lacks (a 400 the schema cannot
        # express), so "valid data must be accepted" is the one check left out.
        excluded = [positive_data_acceptance]
        if mode is GenerationMode.NEGATIVE and not _invalid_on_the_wire(case):
            excluded.append(negative_data_rejection)  # what reaches the server is valid: nothing to refuse
        case.call_and_validate(headers=auth, excluded_checks=excluded)

    check()

"""``/metrics`` of the API: requests counted by route template and status, timed, and scrapeable."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Stack, create_body


def _samples(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with stack.client() as c:
        scraped = c.get("/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
    }


def _requests(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], route: str, status: str) -> float:
    labels = (("method", "GET"), ("route", route), ("status", status))
    return samples.get(("genworker_api_requests_total", labels), 0.0)


def test_requests_are_counted_by_route_template_and_status(fresh_stack: Stack) -> None:
    with fresh_stack.client("alpha") as c:
        created = c.post("/v1/generations", json=create_body(), headers={"Idempotency-Key": "m1"})
        assert created.status_code == 202
        for _ in range(3):
            assert c.get(f"/v1/generations/{created.json()['id']}").status_code == 200
        assert c.get("/v1/generations/gen_nope").status_code == 404
        assert c.get("/v1/no-such-route").status_code == 404

    samples = _samples(fresh_stack)

    template = "/v1/generations/{generation_id}"
    assert _requests(samples, template, "200") == 3
    assert _requests(samples, template, "404") == 1
    assert _requests(samples, "unmatched", "404") == 1
    post = (("method", "POST"), ("route", "/v1/generations"), ("status", "202"))
    assert samples[("genworker_api_requests_total", post)] == 1
    # Raw ids never become label values (bounded series), and the scrape does not count itself.
    assert not any(re.search(r"gen_[0-9a-f]", dict(labels).get("route", "")) for _, labels in samples)
    assert not any(dict(labels).get("route") == "/metrics" for _, labels in samples)
    timed = (("method", "GET"), ("route", template))
    assert samples[("genworker_api_request_seconds_count", timed)] == 4
    assert samples[("genworker_api_request_seconds_sum", timed)] > 0


def test_metrics_stay_out_of_the_public_schema(fresh_stack: Stack) -> None:
    with fresh_stack.client() as c:
        paths = c.get("/v1/openapi.json").json()["paths"]
    assert "/metrics" not in paths

"""Prometheus metrics of one API process, in a registry of its own, served at ``/metrics``.

Requests are counted by method, route template and status, and timed by method and route. The route
label is the template the router matched (``/v1/generations/{generation_id}``), never the raw path, so
the series stay bounded whatever clients send; a request no route matched counts as ``unmatched``.
``/metrics`` itself is not counted. Like the worker's, the endpoint has no key: scrape it from inside
the cluster and keep it off the public ingress (``docs/operators.md``).
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["METRICS_PATH", "ApiMetrics", "MetricsMiddleware", "install_metrics"]

METRICS_PATH = "/metrics"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "genworker_api_requests", "HTTP requests answered.", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "genworker_api_request_seconds",
            "Time to answer an HTTP request.",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )


def install_metrics(app: FastAPI) -> ApiMetrics:
    """Count and time ``app``'s requests and serve the figures at ``/metrics`` (kept out of the OpenAPI)."""
    metrics = ApiMetrics()

    async def scrape() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route(METRICS_PATH, scrape, methods=["GET"], include_in_schema=False)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return metrics


class MetricsMiddleware:
    """Counts and times every request the wrapped app answers (pure ASGI: no body buffering)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == METRICS_PATH:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers if the app raises before starting a response

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")  # set by the router on the scope it was given
            template = getattr(route, "path", None) or "unmatched"
            method = scope["method"]
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)

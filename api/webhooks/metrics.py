"""Prometheus metrics of one webhook sender, in a registry of their own.

The API serves them at its ``/metrics`` beside its own (``api/app.py`` registers this registry there);
``genworker webhooks serve --metrics-port N`` serves them alone. Labels are bounded: a result from a
fixed list, never an endpoint or project id (those are in the delivery log and the log lines).

| metric | what |
|---|---|
| ``genworker_webhook_attempts_total{result}`` | attempts by result: delivered, http_error, timeout, error, refused |
| ``genworker_webhook_deliveries_total{result}`` | deliveries finished: delivered, failed |
| ``genworker_webhook_delivery_seconds`` | a delivered event's latency: its event to the 2xx answer |
| ``genworker_webhook_wait_seconds`` | an attempt's wait: due to sent (its project's full share included) |
| ``genworker_webhook_attempt_seconds`` | one attempt, connect to answer |
| ``genworker_webhook_in_flight`` | attempts in flight in this sender |
| ``genworker_webhook_slots`` | attempts this sender may have in flight (``webhooks.concurrency``) |
| ``genworker_webhook_circuit_opened_total`` | endpoint circuits opened (or reopened by a failed probe) |
| ``genworker_webhook_endpoints_disabled_total`` | endpoints the breaker disabled for good |
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ATTEMPT_RESULTS", "WebhookMetrics"]

ATTEMPT_RESULTS = ("delivered", "http_error", "timeout", "error", "refused")
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, 21600.0, 86400.0)
_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
_ATTEMPT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.attempts = Counter("genworker_webhook_attempts", "Webhook attempts, by result.", ["result"], registry=r)
        self.deliveries = Counter(
            "genworker_webhook_deliveries", "Webhook deliveries finished, by result.", ["result"], registry=r
        )
        self.delivery_seconds = Histogram(
            "genworker_webhook_delivery_seconds",
            "Time from an event to the 2xx answer that delivered it.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.wait_seconds = Histogram(
            "genworker_webhook_wait_seconds",
            "Time from a delivery's due time to the start of its attempt.",
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.attempt_seconds = Histogram(
            "genworker_webhook_attempt_seconds", "Time of one attempt.", buckets=_ATTEMPT_BUCKETS, registry=r
        )
        self.in_flight = Gauge("genworker_webhook_in_flight", "Attempts in flight in this sender.", registry=r)
        self.slots = Gauge(
            "genworker_webhook_slots", "Attempts this sender may have in flight (webhooks.concurrency).", registry=r
        )
        self.circuit_opened = Counter(
            "genworker_webhook_circuit_opened", "Endpoint circuits opened by a run of failed attempts.", registry=r
        )
        self.endpoints_disabled = Counter(
            "genworker_webhook_endpoints_disabled", "Endpoints disabled by the circuit breaker.", registry=r
        )
        for result in ATTEMPT_RESULTS:  # every series exists from the start: rate() needs a zero to begin with
            self.attempts.labels(result)
        for result in ("delivered", "failed"):
            self.deliveries.labels(result)

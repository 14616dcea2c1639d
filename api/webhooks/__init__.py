"""Signed webhooks (Standard Webhooks format) fed by the queue's durable events.

- ``models``: endpoints, deliveries, attempts, event types; ``delivery_id`` (= ``webhook-id``).
- ``store`` / ``redis_store``: ``WebhookStore`` on SQLite (embedded) and Redis (distributed).
- ``sealing``: endpoint secrets, shown once and stored encrypted under a server key.
- ``events``: queue event + record → delivery bodies.
- ``sender``: fan-out from the event cursor, a continuous pool of attempts with retries.
- ``slots`` / ``breaker``: each endpoint's and project's share of the pool; the circuit breaker.
- ``metrics``: the sender's Prometheus figures.
- ``transport`` / ``outbound_transport``: one POST through the outbound guard (``api.outbound``).
- ``service``: the pieces built from settings; ``routes``: ``/v1/webhooks``; ``cli``: ``genworker webhooks``.
"""

"""Shared fixtures. Servers (redis-server, SeaweedFS) start on free loopback ports and stop by PID;
a fixture that cannot start its server fails the test, it never skips."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

pytest_plugins = [
    "tests.fixtures.redis_server",
    "tests.fixtures.redis_cluster",
    "tests.fixtures.seaweed",
    "tests.fixtures.tiny_models",
]

# tests/long: runs of a minute or more that `make test` leaves to `make test-long` (CI stays under 20 minutes);
# the short versions of what they show are in make test (see each module's docstring).
collect_ignore_glob = [] if os.environ.get("GENWORKER_LONG_TESTS") == "1" else ["long/*"]

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

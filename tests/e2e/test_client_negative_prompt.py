"""The client sends ``negative_prompt`` (Python API, asyncio API and CLI) and the API stores it on the
record; a real API over a real SQLite queue."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from genworker_client import AsyncClient, Client
from tests.e2e.conftest import Stack


def test_the_client_sends_negative_prompt(stack: Stack) -> None:
    base = f"{stack.base_url}/v1"
    with Client(base, stack.tokens["alpha"]) as client:
        made = client.create("tiny-wan", "a fox", resolution="144p", negative_prompt="blurry, text")
    assert made.parameters["negative_prompt"] == "blurry, text"
    assert stack.queue.get(made.id).parameters.negative_prompt == "blurry, text"  # type: ignore[union-attr]

    async def create_async() -> str:
        async with AsyncClient(base, stack.tokens["alpha"]) as aclient:
            made = await aclient.create("tiny-wan", "a fox", resolution="144p", negative_prompt="watermark")
            return str(made.parameters["negative_prompt"])

    assert asyncio.run(create_async()) == "watermark"

    env = {**os.environ, "GENWORKER_API_KEY": stack.tokens["alpha"], "GENWORKER_BASE_URL": base}
    cmd = [sys.executable, "-m", "genworker.cli", "client", "create", "--model", "tiny-wan", "--prompt", "a fox"]
    cmd += ["--resolution", "144p", "--negative-prompt", "low quality"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["generation"]["parameters"]["negative_prompt"] == "low quality"

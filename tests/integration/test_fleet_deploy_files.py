"""The deployment files agree with the code: no Docker engine runs here, so what can be checked without
one is checked against the settings model, ``pyproject.toml`` and the generated operator docs.

- every ``GENWORKER_*`` variable the Dockerfiles and ``compose.yaml`` set is one the settings read
  (a typo would otherwise be ignored silently by pydantic-settings);
- the GPU image installs the torch version the ``worker`` extra pins, the API image none, and both copy
  every package ``pyproject.toml`` builds plus the client distribution;
- the GPU image installs requirements/worker.lock and checks, at build, that the installed worker reads its
  catalog and plans every model;
- the GPU image keeps its contract (non-root, weights volume, healthcheck on /healthz, entrypoint);
- the compose example gives the worker a GPU and a stop grace above its drain grace;
- the config reference in ``docs/operators.md`` is the one ``scripts/gen_config_reference.py`` makes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from foundation.settings import WorkerSettings
from scripts.gen_config_reference import all_names

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile", "Dockerfile.gpu"]
VARIABLE = re.compile(r"\bGENWORKER_[A-Z0-9_]+")


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return data


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", value)
    assert match, value
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


@pytest.mark.parametrize("name", [*DOCKERFILES, "compose.yaml"])
def test_every_genworker_variable_set_for_deployment_is_a_setting(name: str) -> None:
    used = set(VARIABLE.findall((ROOT / name).read_text(encoding="utf-8")))
    assert used, f"{name} sets no GENWORKER_* variable"
    assert used <= all_names(), sorted(used - all_names())


@pytest.mark.parametrize("name", DOCKERFILES)
def test_images_install_the_right_torch_and_every_package(name: str) -> None:
    """The GPU image installs the worker extra's pinned torch; the API image installs no torch at all."""
    text = (ROOT / name).read_text(encoding="utf-8")
    project = _pyproject()["project"]
    assert not [d for d in project["dependencies"] if d.startswith("torch")]  # the API tier's set has none
    pins = [d for d in project["optional-dependencies"]["worker"] if re.match(r"torch\b", d)]  # not torchao
    assert pins == ["torch==2.13.0"]
    gpu = name == "Dockerfile.gpu"
    assert set(re.findall(r'"(torch==[^"]+)"', text)) == (set(pins) if gpu else set())
    packages = _pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    copied = set(re.findall(r"^COPY (\S+) ", text, flags=re.MULTILINE))
    assert {*packages, "client"} <= copied, {*packages, "client"} - copied
    install = '--no-deps /app/client "/app[worker]"' if gpu else "-c requirements/worker.lock /app/client /app"
    assert f"RUN pip install {install} && pip check" in text
    assert re.search(r"^USER 10001:10001$", text, flags=re.MULTILINE)


def test_the_gpu_image_installs_the_lock_and_builds_only_if_the_installed_worker_reads_its_configs() -> None:
    """The lock is the whole closure (no dependency resolved at build time), and the build step runs what
    ``genworker worker`` needs at start: the catalog and the memory plan, both read from the wheel."""
    text = (ROOT / "Dockerfile.gpu").read_text(encoding="utf-8")
    assert "RUN pip install --no-deps -r requirements/worker.lock\n" in text
    assert text.index("requirements/worker.lock") < text.index('"/app[worker]"')
    step = text[text.index('RUN pip install --no-deps /app/client "/app[worker]"') :].split("\n\n", 1)[0]
    assert "genworker catalog" in step and "genworker plan --gpu h100-80gb" in step


def test_the_gpu_image_runs_the_worker_with_a_healthcheck_and_a_weights_volume() -> None:
    text = (ROOT / "Dockerfile.gpu").read_text(encoding="utf-8")
    assert re.search(r"^FROM nvidia/cuda:\$\{CUDA_VERSION\}-base-ubuntu\S+$", text, flags=re.MULTILINE)
    assert re.search(r"^ARG CUDA_VERSION=\d+\.\d+\.\d+$", text, flags=re.MULTILINE)
    assert 'ENTRYPOINT ["genworker", "worker"]' in text
    assert 'VOLUME ["/weights"]' in text
    assert re.search(r"^HEALTHCHECK .*\n\s+CMD curl -fsS \S+/healthz", text, flags=re.MULTILINE)
    assert "python3.11" in text and "NVIDIA_DRIVER_CAPABILITIES=compute,utility,video" in text


def test_compose_wires_redis_aof_the_store_and_a_gpu_worker() -> None:
    services = _compose()["services"]
    assert set(services) == {"redis", "seaweedfs", "api", "worker"}
    assert "--appendonly" in services["redis"]["command"]
    assert services["redis"]["command"][services["redis"]["command"].index("--appendonly") + 1] == "yes"
    worker = services["worker"]
    assert worker["build"]["dockerfile"] == "Dockerfile.gpu" and services["api"]["build"]["dockerfile"] == "Dockerfile"
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert _seconds(worker["stop_grace_period"]) > WorkerSettings().drain_grace_s
    for name in ("api", "worker"):
        env = services[name]["environment"]
        assert env["GENWORKER_QUEUE__BACKEND"] == "redis" and env["GENWORKER_STORE__BACKEND"] == "s3"
    assert services["api"]["environment"]["GENWORKER_WEBHOOKS__SECRET_KEY"].startswith("${WEBHOOK_KEY:?")
    for published in services["api"]["ports"] + services["seaweedfs"]["ports"]:
        assert published.startswith("127.0.0.1:"), published  # loopback unless the operator opens it


def test_the_config_reference_in_the_operator_docs_is_current() -> None:
    check = [sys.executable, str(ROOT / "scripts" / "gen_config_reference.py"), "--check"]
    done = subprocess.run(check, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_every_setting_has_a_description_in_the_reference() -> None:
    from scripts.gen_config_reference import variables

    missing = [v.name for _, group in variables() for v in group if not v.description]
    assert missing == []

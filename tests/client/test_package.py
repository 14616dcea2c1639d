"""The client as an integrator installs it: its own wheel, in a fresh venv without torch, used from an
application directory that has a ``client.py`` of its own; and the server's API tier resolves without
the worker's model stack.

pip builds the wheel from ``client/`` and installs it with its dependencies (httpx, pydantic, tenacity) from the
package index or pip's cache; one venv serves the whole session.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.client.conftest import FAST_MODEL, Server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MODEL_STACK = {"torch", "diffusers", "transformers", "accelerate", "imageio-ffmpeg"}

# The application's own module named `client`: it must keep working beside the installed client.
_APP_CLIENT = 'DECOY = "the application\'s own client.py"\n'

_FLOW = """
import hashlib, importlib.util, json, sys

import client  # the application's own module, first on sys.path (the script's directory)
from genworker_client import Client
import genworker_client

base_url, api_key, out, model = sys.argv[1:5]
with Client(base_url, api_key) as c:
    created = c.create(model, "a lighthouse at dusk, packaged", variant="fast", resolution="144p", seed=11)
    done = c.wait(created, timeout_s=150, first_poll_s=0.5, poll_min_s=0.5, poll_max_s=1.0)
    files = c.download(done, out)
print(json.dumps({
    "app_client": client.DECOY,
    "module": genworker_client.__file__,
    "torch": importlib.util.find_spec("torch") is not None,
    "status": done.status,
    "artifacts": [{"bytes": a.bytes, "sha256": a.sha256} for a in done.artifacts],
    "files": [str(f) for f in files],
}))
"""


@dataclass(frozen=True)
class ClientVenv:
    python: Path
    wheel: Path


def _pip(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="session")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientVenv]:
    """The client wheel built from ``client/`` and installed alone into a fresh venv (no pip in it: the
    test environment's pip installs into it with ``--python``)."""
    work = tmp_path_factory.mktemp("client-package")
    _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(work / "dist"), str(ROOT / "client"))
    (wheel,) = (work / "dist").glob("genworker_client-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "--quiet", str(wheel))
    yield ClientVenv(python, wheel)


def test_the_client_wheel_works_alone_beside_an_app_own_client_module(
    client_venv: ClientVenv, server: Server, tmp_path: Path
) -> None:
    names = subprocess.run(
        [
            str(client_venv.python),
            "-c",
            "import importlib.metadata as m; print(sorted(d.name for d in m.distributions()))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "genworker-client" in names.replace("_", "-")
    assert not {n for n in MODEL_STACK if f"'{n}'" in names}, names
    assert "'genworker'" not in names  # the server distribution is not needed

    app = tmp_path / "webapp"
    app.mkdir()
    (app / "client.py").write_text(_APP_CLIENT)
    (app / "flow.py").write_text(_FLOW)
    done = subprocess.run(
        [str(client_venv.python), "flow.py", server.base_url, server.api_key, str(app / "out"), FAST_MODEL],
        cwd=app,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},  # nothing inherited: no PYTHONPATH to the repo
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["app_client"] == "the application's own client.py"
    assert Path(out["module"]).is_relative_to(client_venv.python.parent.parent)  # the wheel, not the repo
    assert out["torch"] is False
    assert out["status"] == "succeeded"
    files = [Path(f) for f in out["files"]]
    assert len(files) == len(out["artifacts"]) >= 1
    for path, artifact in zip(files, out["artifacts"], strict=True):
        data = path.read_bytes()
        assert len(data) == artifact["bytes"] and hashlib.sha256(data).hexdigest() == artifact["sha256"]


def _resolve(*requirements: str, report: Path) -> list[dict[str, Any]]:
    """What ``pip install`` of ``requirements`` would install into an empty environment (a dry run)."""
    _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *requirements)
    items: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    return items


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_api_tier_resolves_without_the_model_stack(tmp_path: Path) -> None:
    items = _resolve("./client", ".", report=tmp_path / "report.json")
    api_tier = {_name(item["metadata"]["name"]) for item in items}
    assert {"genworker", "genworker-client", "fastapi", "uvicorn", "redis", "boto3", "httpx"} <= api_tier
    assert not api_tier & MODEL_STACK, sorted(api_tier & MODEL_STACK)
    # The control: the server distribution does declare the model stack, behind its `worker` extra only.
    (server,) = [item["metadata"] for item in items if item["metadata"]["name"] == "genworker"]
    markers = {_name(r): r.partition(";")[2].replace('"', "'") for r in server["requires_dist"]}
    behind_extra = {name for name, marker in markers.items() if "extra == 'worker'" in marker}
    unconditional = {name for name, marker in markers.items() if "extra ==" not in marker}
    assert behind_extra >= MODEL_STACK, sorted(MODEL_STACK - behind_extra)
    assert not unconditional & MODEL_STACK
    assert "torch==2.13.0" in {r.split(";")[0].strip() for r in server["requires_dist"]}


def test_the_cli_extra_installs_the_genworker_client_command(client_venv: ClientVenv, server: Server) -> None:
    """``pip install './client[cli]'`` gives a working ``genworker-client``; the bare client has the
    script too, and it names the extra to add instead of an import error."""
    command = client_venv.python.parent / "genworker-client"
    env = {
        "PATH": "/usr/bin:/bin",
        "GENWORKER_BASE_URL": f"http://127.0.0.1:{server.port}",
        "GENWORKER_API_KEY": server.api_key,
    }
    bare = subprocess.run([str(command), "models"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert bare.returncode == 1
    assert "pip install './client[cli]'" in bare.stderr  # the distribution is on no index

    _pip("--python", str(client_venv.python), "install", "--quiet", f"{client_venv.wheel}[cli]")
    models = subprocess.run([str(command), "models"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert models.returncode == 0, models.stderr[-3000:]
    assert FAST_MODEL in {m["id"] for m in json.loads(models.stdout)}
    usage = subprocess.run([str(command), "--help"], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert "genworker-client" in usage.stdout and "wait" in usage.stdout

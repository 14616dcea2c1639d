"""The API tier runs without the worker's model stack: with torch, diffusers, transformers, accelerate
and imageio-ffmpeg made unimportable (as in an install without the ``worker`` extra), the ``genworker``
command tree loads, ``genworker api``'s app builds over real SQLite and local backends, and it answers.
A second check reads ``sys.modules`` after the same steps with nothing blocked: none was imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKER_ONLY = ("torch", "diffusers", "transformers", "accelerate", "imageio_ffmpeg", "safetensors", "PIL")

_SCRIPT = """
import json, sys
BLOCK = {block}
for name in {names}:
    if BLOCK:
        sys.modules[name] = None  # `import name` now raises ImportError, as if it were not installed

from typer.testing import CliRunner
from fastapi.testclient import TestClient

from genworker.cli import app as cli
from api.server import build_app
from foundation.settings import Settings

assert CliRunner().invoke(cli, ["api", "--help"]).exit_code == 0
data = sys.argv[1]
settings = Settings(data_dir=data, queue={{"backend": "sqlite", "sqlite_path": data + "/queue.db"}},
                    store={{"backend": "local", "local_root": data + "/artifacts"}})
with TestClient(build_app(settings)) as c:
    answers = {{p: c.get(p).status_code for p in ("/healthz", "/readyz", "/v1/models")}}
loaded = sorted(n for n in {names} if sys.modules.get(n) is not None)
print(json.dumps({{"answers": answers, "loaded": loaded}}))
"""


def _run(tmp_path: Path, *, block: bool) -> dict[str, object]:
    script = textwrap.dedent(_SCRIPT.format(block=block, names=WORKER_ONLY))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_api_serves_with_the_model_stack_unimportable(tmp_path: Path) -> None:
    out = _run(tmp_path, block=True)
    assert out["answers"] == {"/healthz": 200, "/readyz": 200, "/v1/models": 200}


def test_the_api_imports_none_of_the_model_stack(tmp_path: Path) -> None:
    out = _run(tmp_path, block=False)
    assert out["loaded"] == []
    assert out["answers"] == {"/healthz": 200, "/readyz": 200, "/v1/models": 200}

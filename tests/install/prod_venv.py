"""A worker installed as ``Dockerfile.gpu`` installs it, in a fresh venv outside the checkout.

The image installs torch, then ``requirements/worker.lock`` without dependencies, then the client and the
server with its ``worker`` extra from their wheels without dependencies, and ``pip check`` proves the lock
holds the whole closure. This does the same, except that torch is the lock's own line here (the CPU wheel of
the pinned version; the image's CUDA build adds only torch's CUDA libraries, which torch pins itself).

Also the import scan: every module the shipped code imports, read from the installed sources with ``ast``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "worker.lock"
# Run by the venv's python with module names as arguments: prints {module: error} for those that fail to import.
IMPORT_CHECK = """
import importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as e:
        failed[name] = f"{type(e).__name__}: {e}"
print(json.dumps(failed))
"""
# What the installs would otherwise take from the test's own environment.
_HOST_ONLY = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


@dataclass(frozen=True)
class ProdInstall:
    venv: Path
    outside: Path  # a working directory outside the checkout

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def site_packages(self) -> Path:
        return next((self.venv / "lib").glob("python3*/site-packages"))

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The test's environment without its Python path and settings, the venv first on PATH, plus ``extra``."""
        env = {k: v for k, v in os.environ.items() if k not in _HOST_ONLY and not k.startswith("GENWORKER_")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["HF_HUB_OFFLINE"] = "1"
        return {**env, **(extra or {})}

    def start(self, name: str, args: list[str], env: dict[str, str]) -> Background:
        """``args[0]`` from the venv's bin, started in ``outside``; its output in ``<name>.out`` and ``.err``."""
        out, err = self.outside / f"{name}.out", self.outside / f"{name}.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                [str(self.bin / args[0]), *args[1:]], cwd=self.outside, env=env, stdout=stdout, stderr=stderr, text=True
            )
        return Background(proc, out, err)


@dataclass(frozen=True)
class Background:
    """A command of the production install running beside the test (the tests wait for it when they need it)."""

    proc: subprocess.Popen[str]
    out: Path
    err: Path

    def result(self, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        self.proc.wait(timeout=timeout_s)
        stdout, stderr = self.out.read_text(encoding="utf-8"), self.err.read_text(encoding="utf-8")
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, stdout, stderr)

    def stop(self) -> None:
        """Kill it if it still runs (this process only, by PID)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _pip(*args: str, timeout_s: float = 600) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def install(work: Path) -> ProdInstall:
    """Build both wheels (not editable), make a venv in ``work`` and install them as the image does."""
    assert not work.resolve().is_relative_to(ROOT), f"{work} is inside the checkout"
    wheels = work / "wheels"
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(ROOT / "client"), str(ROOT))
    client = next(wheels.glob("genworker_client-*.whl"))
    server = next(wheels.glob("genworker-*.whl"))
    venv = work / "venv"
    # No pip inside: this process's pip installs into it (--python), as fast and one tool fewer to install.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    # --no-compile: bytecode is a cache (the image writes it); compiling all of torch here costs ~45 s of 2 cores.
    quiet = ("--quiet", "--no-compile", "--no-deps")
    _pip("--python", python, "install", *quiet, "--requirement", str(LOCK))
    _pip("--python", python, "install", *quiet, str(client), f"{server}[worker]")
    _pip("--python", python, "check")
    outside = work / "cwd"
    outside.mkdir()
    return ProdInstall(venv=venv, outside=outside)


def own_packages(site_packages: Path) -> set[str]:
    """Top-level import names the genworker and genworker-client wheels installed (from their RECORDs)."""
    names: set[str] = set()
    for record in site_packages.glob("genworker*.dist-info/RECORD"):
        for line in record.read_text(encoding="utf-8").splitlines():
            top = line.split(",", 1)[0].split("/", 1)[0]
            if top and not top.endswith(".dist-info") and top != "..":
                names.add(top.removesuffix(".py"))
    return names


def imported_modules(package_dir: Path) -> dict[str, str]:
    """Each top-level module imported anywhere in ``package_dir`` (module level or inside functions, but not
    under ``if TYPE_CHECKING:``, which never runs), with one file that imports it."""
    found: dict[str, str] = {}
    for path in sorted(package_dir.rglob("*.py")):
        scan = _ImportScan()
        scan.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for name in scan.names:
            found.setdefault(name, str(path.relative_to(package_dir.parent)))
    return found


class _ImportScan(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(alias.name.split(".")[0] for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self.names.add(node.module.split(".")[0])

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        typing_only = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        for child in node.orelse if typing_only else [*node.body, *node.orelse]:
            self.visit(child)
        self.visit(node.test)

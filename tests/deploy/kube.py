"""Rendering and reading the Kubernetes manifests of ``deploy/kubernetes`` for the tests.

Overlays are rendered by ``kubectl kustomize`` (``make deps`` installs Debian's ``kubernetes-client``
when no kubectl is on the PATH); the manifests use only what the kustomize built into kubectl 1.20
understands, so any kubectl since then renders them the same. A missing kubectl fails the tests.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUBE / "overlays").iterdir() if (p / "kustomization.yaml").is_file())

Doc = dict[str, Any]


def render(path: Path) -> list[Doc]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not installed: run `make deps` (Debian package kubernetes-client)"
    done = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"kubectl kustomize {path} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def worker_deployments(docs: list[Doc]) -> list[Doc]:
    return [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].startswith("genworker-worker-")]


def container(deployment: Doc, name: str) -> Doc:
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def container_env(docs: list[Doc], c: Doc, secret_value: str = "from-a-secret") -> dict[str, str]:
    """The environment the container starts with: its ConfigMaps (envFrom), then its own ``env``."""
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        env.update(named(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for var in c.get("env", []):
        env[var["name"]] = var.get("value", secret_value)
    return env


def secret_refs(docs: list[Doc]) -> Iterator[tuple[str, str, str]]:
    """(where, secret name, key) of every secretKeyRef in the rendered objects."""

    def walk(node: Any, where: str) -> Iterator[tuple[str, str, str]]:
        if isinstance(node, dict):
            ref = node.get("secretKeyRef")
            if isinstance(ref, dict):
                yield where, ref["name"], ref["key"]
            for value in node.values():
                yield from walk(value, where)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value, where)

    for doc in docs:
        yield from walk(doc, f"{doc['kind']}/{doc['metadata']['name']}")


def port_number(c: Doc, port: int | str) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    return int(next(p["containerPort"] for p in c["ports"] if p["name"] == port))

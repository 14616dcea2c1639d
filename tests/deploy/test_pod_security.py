"""Pod security of the rendered overlays, and the webhook key every API pod gets from a Secret.

- every pod: non-root, seccomp ``RuntimeDefault``, no service account token; every container: no privilege
  escalation, all capabilities dropped, a read-only root filesystem with its writable paths as volumes;
- no secret reaches a command line: no container's command or args names a variable a Secret fills
  (Kubernetes would expand ``$(VAR)`` into argv), and the Redis container's own start script, run here
  with a real redis-server, takes the password on stdin and answers the probe through ``REDISCLI_AUTH``;
- NetworkPolicies: everything in the namespace denied by default; the API and the workers may reach DNS,
  the store and Redis, named as their settings name them, and nothing else but the API's public HTTPS;
- every pod that runs ``genworker api`` has ``webhooks.secret_key`` from a Secret, a key the settings accept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from cryptography.fernet import Fernet

from foundation.settings import ENV_PREFIX, Settings, load_settings
from foundation.settings.webhooks import secret_keys
from tests.deploy.kube import KUBE, OVERLAYS, Doc, container, container_env, named, of_kind, render
from tests.e2e.conftest import free_port

WORKLOADS = ("Deployment", "StatefulSet")


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Doc]]:
    return {overlay: render(KUBE / "overlays" / overlay) for overlay in OVERLAYS}


def _pods(docs: list[Doc]) -> list[tuple[str, Doc, dict[str, str]]]:
    return [
        (d["metadata"]["name"], d["spec"]["template"]["spec"], d["spec"]["template"]["metadata"]["labels"])
        for kind in WORKLOADS
        for d in of_kind(docs, kind)
    ]


def _settings_of(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    with monkeypatch.context() as m:
        for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
            m.delenv(name)
        for name, value in env.items():
            m.setenv(name, value)
        return load_settings()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_runs_locked_down(rendered: dict[str, list[Doc]], overlay: str) -> None:
    claims = {
        d["metadata"]["name"]: {t["metadata"]["name"] for t in d["spec"].get("volumeClaimTemplates", [])}
        for d in of_kind(rendered[overlay], "StatefulSet")
    }
    for name, pod, _labels in _pods(rendered[overlay]):
        ctx = pod["securityContext"]
        assert ctx["runAsNonRoot"] and ctx["runAsUser"] >= 10000, name
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["automountServiceAccountToken"] is False, name
        volumes = {v["name"] for v in pod.get("volumes", [])} | claims.get(name, set())
        for c in pod["containers"]:
            sc = c["securityContext"]
            what = f"{name}/{c['name']}"
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}, what
            assert sc["readOnlyRootFilesystem"] is True, what
            assert c["image"].partition(":")[2], f"{what}: an image with a tag"
            assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes, what


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_reaches_a_command_line(rendered: dict[str, list[Doc]], overlay: str) -> None:
    for name, pod, _labels in _pods(rendered[overlay]):
        for c in pod["containers"]:
            secret_vars = {v["name"] for v in c.get("env", []) if "secretKeyRef" in v.get("valueFrom", {})}
            argv = " ".join(c.get("command", []) + c.get("args", []))
            for var in secret_vars:
                assert f"$({var})" not in argv, f"{name}/{c['name']}: {var} is expanded into the command line"
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                exec_cmd = " ".join(c.get(probe, {}).get("exec", {}).get("command", []))
                assert " -a " not in exec_cmd and "--pass" not in exec_cmd, f"{name}/{c['name']} {probe}"


def test_the_redis_start_script_takes_the_password_on_stdin(rendered: dict[str, list[Doc]], tmp_path: Path) -> None:
    """The container's own command and probe, run here: redis-server wrapped only to use a free port and a
    scratch dir (the image's working directory is its /data volume)."""
    c = container(named(rendered["single-redis"], "StatefulSet", "genworker-redis"), "redis")
    real = shutil.which("redis-server")
    assert real, "redis-server is not installed: run `make deps`"
    port, password = free_port(), "pw-" + Fernet.generate_key().decode()[:20]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "redis-server"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@" --port {port} --dir {tmp_path}\n', encoding="utf-8")
    wrapper.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "REDIS_PASSWORD": password, "REDISCLI_AUTH": password}
    proc = subprocess.Popen(c["command"] + c["args"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, password=password, socket_timeout=2)
        deadline = time.monotonic() + 20
        while True:
            try:
                assert client.ping()
                break
            except redis.ConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, "redis did not start"
                time.sleep(0.05)
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=2).set("k", "v")  # the password is required
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        probe = c["readinessProbe"]["exec"]["command"]
        probe_env = {**env, "PATH": os.environ["PATH"]}
        probe = [*probe[:-1], probe[-1].replace("redis-cli", f"redis-cli -p {port}")]
        done = subprocess.run(probe, env=probe_env, capture_output=True, timeout=20, check=False)
        assert done.returncode == 0, done.stderr
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert password.encode() not in cmdline
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# ---------------------------------------------------------------------------------------- network
def _selects(policy: Doc, labels: dict[str, str]) -> bool:
    selector = policy["spec"]["podSelector"]  # {} selects every pod of the namespace
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _egress(docs: list[Doc], labels: dict[str, str]) -> list[dict[str, Any]]:
    rules = []
    for policy in of_kind(docs, "NetworkPolicy"):
        if "Egress" in policy["spec"]["policyTypes"] and _selects(policy, labels):
            rules.extend(policy["spec"].get("egress", []))
    return rules


def _reaches(rules: list[dict[str, Any]], namespace: str, pod: dict[str, str] | None, port: int) -> bool:
    for rule in rules:
        if port not in {p["port"] for p in rule.get("ports", [])}:
            continue
        for peer in rule.get("to", []):
            ns = peer.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
            pods = peer.get("podSelector", {}).get("matchLabels", {})
            if "ipBlock" in peer:
                continue
            if (ns or "genworker") == namespace and (not pods or (pod is not None and pods.items() <= pod.items())):
                return True
    return False


def _service_namespace(host: str) -> str:
    """``[pod.]service.namespace.svc[.cluster.local]`` → namespace."""
    parts = host.split(".")
    assert "svc" in parts[2:4], host
    return parts[parts.index("svc") - 1]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_open_only_what_the_settings_name(
    rendered: dict[str, list[Doc]], overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = rendered[overlay]
    policies = of_kind(docs, "NetworkPolicy")
    deny = [
        p
        for p in policies
        if p["spec"]["podSelector"] == {}
        and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
    ]
    assert deny, "no default-deny policy"
    key = Fernet.generate_key().decode()
    for name, pod, labels in _pods(docs):
        if labels["app.kubernetes.io/name"] not in ("genworker-api", "genworker-worker"):
            continue
        c = pod["containers"][0]
        settings = _settings_of(container_env(docs, c, secret_value=key), monkeypatch)
        rules = _egress(docs, labels)
        store = urlsplit(settings.store.s3_endpoint_url or "")
        assert store.hostname and store.port
        assert _reaches(rules, _service_namespace(store.hostname), None, store.port), f"{name}: the store"
        queue = urlsplit(settings.queue.redis_url)
        assert queue.hostname and queue.port
        namespace = _service_namespace(queue.hostname)
        redis_pod = {"app.kubernetes.io/name": queue.hostname.split(".")[0]} if namespace == "genworker" else None
        assert _reaches(rules, namespace, redis_pod, queue.port), f"{name}: Redis"
        assert _reaches(rules, "kube-system", {"k8s-app": "kube-dns"}, 53), f"{name}: DNS"
        ports = {p["port"] for r in rules for p in r.get("ports", [])}
        public = [r for r in rules if any("ipBlock" in peer for peer in r.get("to", []))]
        if labels["app.kubernetes.io/name"] == "genworker-worker":
            assert ports == {53, store.port, queue.port} and not public, f"{name}: {ports}"
        else:  # webhook receivers and image URLs: public HTTPS, never a private range
            assert ports == {53, store.port, queue.port, 443}, f"{name}: {ports}"
            for rule in public:
                block = rule["to"][0]["ipBlock"]
                assert block["cidr"] == "0.0.0.0/0" and {"10.0.0.0/8", "169.254.0.0/16"} <= set(block["except"])


# ----------------------------------------------------------------------------------- webhook key
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_api_pod_gets_the_webhook_key_from_a_secret(
    rendered: dict[str, list[Doc]], overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = rendered[overlay]
    api_pods = 0
    key = Fernet.generate_key().decode()
    for name, pod, _labels in _pods(docs):
        for c in pod["containers"]:
            if c.get("args", [])[:1] != ["api"] and c.get("args", [])[:2] != ["webhooks", "serve"]:
                continue
            api_pods += 1
            source = next(v for v in c["env"] if v["name"] == "GENWORKER_WEBHOOKS__SECRET_KEY")
            assert source["valueFrom"]["secretKeyRef"]["name"] == "genworker-webhooks", name
            settings = _settings_of(container_env(docs, c, secret_value=key), monkeypatch)
            assert settings.queue.backend == "redis" and secret_keys(settings.webhooks.secret_key) == [key]
    assert api_pods >= 1

"""The Kubernetes manifests render, validate, and agree with the code they deploy.

- every overlay renders with ``kubectl kustomize`` and every object validates offline: built-in kinds
  with ``kubernetes-validate`` (strict: unknown fields fail), KEDA's kinds against the CRD schemas
  shipped in ``deploy/kubernetes/keda/crds`` (unknown fields fail too);
- each worker pod's probes, ports, grace period and resources are checked against the ``Settings``
  its own environment produces (one source of truth: the manifest's env and the settings defaults,
  never a number copied into the test);
- the KEDA triggers read the streams and group named by ``foundation/queue/keys.py``, on the Redis the
  pods use; the HPA reads the recording rule ``deploy/prometheus`` defines;
- every secret the pods reference is one ``deploy/kubernetes/secrets`` makes.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from foundation.core.catalog import load_catalog
from foundation.queue import keys
from foundation.settings import ENV_PREFIX, Settings, load_settings
from tests.deploy.kube import (
    KUBE,
    OVERLAYS,
    ROOT,
    Doc,
    container,
    container_env,
    named,
    of_kind,
    port_number,
    render,
    secret_refs,
    worker_deployments,
)
from worker import loop

# The oldest Kubernetes these manifests are written for, and the newest schemas the package ships.
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
# After the drain grace, the worker interrupts the job (one step), releases it, waits for the GPU
# thread and exits: this margin on top of loop._INTERRUPT_WAIT_S is what that tail may take.
EXIT_MARGIN_S = 15
KEDA_CRDS = KUBE / "keda" / "crds"


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Doc]]:
    return {overlay: render(KUBE / "overlays" / overlay) for overlay in OVERLAYS}


def test_the_overlays_are_the_documented_ones() -> None:
    assert OVERLAYS == ["redis-cluster", "single-redis", "single-redis-hpa"]


# ------------------------------------------------------------------------------------------- schemas
def _strict(schema: Any) -> Any:
    """An OpenAPI v3 CRD schema as a JSON schema that refuses unknown fields, as the API server's
    strict field validation does (objects that preserve unknown fields stay open)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas = {}
    for path in sorted(KEDA_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            # metadata is typed `object` only; the API server checks it with ObjectMeta's schema.
            schema["properties"]["metadata"] = {"type": "object"}
            schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def test_the_keda_crds_are_keda_own_and_cover_the_kinds_used(rendered: dict[str, list[Doc]]) -> None:
    schemas = _crd_schemas()
    assert ("keda.sh/v1alpha1", "ScaledObject") in schemas
    assert ("keda.sh/v1alpha1", "TriggerAuthentication") in schemas
    # The shipped schema is strict enough to catch a misspelt field.
    bad = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"}}
    bad["spec"] = {"scaleTargetRef": {"name": "x"}, "triggers": [{"type": "cpu", "metadata": {}}], "minReplicas": 1}
    with pytest.raises(jsonschema.ValidationError, match="minReplicas"):
        jsonschema.validate(bad, schemas[("keda.sh/v1alpha1", "ScaledObject")])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates(rendered: dict[str, list[Doc]], overlay: str) -> None:
    crds = _crd_schemas()
    for doc in rendered[overlay]:
        what = f"{overlay}: {doc['kind']}/{doc['metadata']['name']}"
        if doc["apiVersion"].startswith("keda.sh/"):
            schema = crds[(doc["apiVersion"], doc["kind"])]
            jsonschema.validate(doc, schema)
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                raise AssertionError(f"{what} is invalid for Kubernetes {version}: {e.message}") from None


# ------------------------------------------------------------------------------------- worker pods
def _settings_of(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings ``genworker worker`` builds from exactly this environment (and the defaults)."""
    with monkeypatch.context() as m:
        for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
            m.delenv(name)
        for name, value in env.items():
            m.setenv(name, value)
        return load_settings()


def _seconds(duration: str) -> int:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, duration
    return int(match.group(1))


def _dockerfile_start_period_s() -> int:
    text = (ROOT / "Dockerfile.gpu").read_text(encoding="utf-8")
    match = re.search(r"HEALTHCHECK .*--start-period=(\d+s)", text)
    assert match, "Dockerfile.gpu has no HEALTHCHECK start period"
    return _seconds(match.group(1))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_worker_pods_match_the_settings_their_environment_makes(
    rendered: dict[str, list[Doc]], overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = rendered[overlay]
    workers = worker_deployments(docs)
    assert len(workers) >= 2, "one Deployment per GPU class"
    catalog = load_catalog(None)
    for deployment in workers:
        name = deployment["metadata"]["name"]
        pod = deployment["spec"]["template"]["spec"]
        c = container(deployment, "worker")
        settings = _settings_of(container_env(docs, c), monkeypatch)
        ws = settings.worker
        assert settings.queue.backend == "redis", name

        # Probes and scraping on the status server the settings start.
        assert ws.metrics_port is not None and ws.metrics_host == "0.0.0.0", name
        assert {p["containerPort"] for p in c["ports"]} == {ws.metrics_port}, name
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
            get = c[probe]["httpGet"]
            assert (get["path"], port_number(c, get["port"])) == (path, ws.metrics_port), f"{name} {probe}"
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert int(annotations["prometheus.io/port"]) == ws.metrics_port, name
        startup = c["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= _dockerfile_start_period_s(), name

        # Stopping: preStop, then the drain on SIGTERM, then the release and exit, all within the grace.
        pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
        assert pre_stop[0] == "sleep" and len(pre_stop) == 2, f"{name}: the preStop hook must not signal the worker"
        needed = int(pre_stop[1]) + ws.drain_grace_s + loop._INTERRUPT_WAIT_S + EXIT_MARGIN_S
        grace = pod["terminationGracePeriodSeconds"]
        assert grace >= needed, f"{name}: grace {grace}s < preStop + drain_grace_s + release ({needed}s)"
        assert grace <= needed + 60, f"{name}: grace {grace}s far above what a drain takes ({needed}s)"

        # One GPU per worker; the models it hosts exist and its preloaded ones fit its cache budget.
        resources = c["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == 1 == resources["requests"]["nvidia.com/gpu"], name
        assert pod["nodeSelector"], f"{name}: a GPU class needs a node selector"
        assert set(ws.preload) <= set(ws.hosted_models), name
        specs = [catalog.get(m) for m in ws.hosted_models]
        assert all(s is not None and not s.tiny for s in specs), f"{name}: {ws.hosted_models}"
        preload_gb = sum(catalog.models[m].gpu_memory_gb for m in ws.preload)
        assert preload_gb <= settings.models.cache_budget_gb, name
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["weights"]["mountPath"] == settings.models.weights_dir and mounts["weights"]["readOnly"], name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_disruption_budget_selects_a_deployment(rendered: dict[str, list[Doc]], overlay: str) -> None:
    docs = rendered[overlay]
    deployments = of_kind(docs, "Deployment")
    for pdb in of_kind(docs, "PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        matches = [d for d in deployments if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert len(matches) == 1, pdb["metadata"]["name"]
    assert {d["metadata"]["name"] for d in deployments} == {
        named(docs, "Deployment", p["metadata"]["name"])["metadata"]["name"]
        for p in of_kind(docs, "PodDisruptionBudget")
    }


# --------------------------------------------------------------------------------------- autoscaling
def _hosted(docs: list[Doc], deployment: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, list[str]]:
    c = container(named(docs, "Deployment", deployment), "worker")
    settings = _settings_of(container_env(docs, c), monkeypatch)
    return settings, settings.worker.hosted_models


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if not o.endswith("-hpa")])
def test_keda_scales_each_pool_on_its_models_streams(
    rendered: dict[str, list[Doc]], overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = rendered[overlay]
    scaled = of_kind(docs, "ScaledObject")
    assert {s["spec"]["scaleTargetRef"]["name"] for s in scaled} == {
        d["metadata"]["name"] for d in worker_deployments(docs)
    }
    auths = {a["metadata"]["name"] for a in of_kind(docs, "TriggerAuthentication")}
    for so in scaled:
        settings, hosted = _hosted(docs, so["spec"]["scaleTargetRef"]["name"], monkeypatch)
        queue = settings.queue
        url = urlsplit(queue.redis_url)
        cluster = queue.redis_mode == "cluster"
        triggers = so["spec"]["triggers"]
        by_kind: dict[str, set[str]] = {"lagCount": set(), "pendingEntriesCount": set()}
        for t in triggers:
            meta = t["metadata"]
            assert t["type"] == ("redis-cluster-streams" if cluster else "redis-streams"), t["name"]
            assert meta["consumerGroup"] == keys.CONSUMER_GROUP, t["name"]
            assert t["authenticationRef"]["name"] in auths, t["name"]
            if cluster:
                seeds = {f"{url.hostname}:{url.port}", *queue.cluster_nodes}
                assert {a.strip() for a in meta["addresses"].split(",")} == seeds, t["name"]
            else:
                assert meta["address"] == f"{url.hostname}:{url.port}", t["name"]
                assert int(meta["databaseIndex"]) == int(url.path.strip("/") or 0), t["name"]
            kind = next(k for k in by_kind if k in meta)
            by_kind[kind].add(meta["stream"])
        expected = {keys.job_stream(m) for m in hosted}
        assert by_kind == {"lagCount": expected, "pendingEntriesCount": expected}, so["metadata"]["name"]
        # The formula adds up every trigger (waiting + running over all hosted models), nothing else.
        formula = so["spec"]["advanced"]["scalingModifiers"]["formula"]
        assert sorted(re.split(r"\s*\+\s*", formula)) == sorted(t["name"] for t in triggers)


def test_the_hpa_alternative_reads_the_recorded_depth_of_the_pool_models(
    rendered: dict[str, list[Doc]], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = rendered["single-redis-hpa"]
    assert not of_kind(docs, "ScaledObject")
    adapter = yaml.safe_load(
        (KUBE / "overlays" / "single-redis-hpa" / "adapter-rules.yaml").read_text(encoding="utf-8")
    )
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yaml").read_text(encoding="utf-8"))
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    external = {e["name"]["as"]: e["seriesQuery"].split("{")[0] for e in adapter["external"]}
    hpas = of_kind(docs, "HorizontalPodAutoscaler")
    assert {h["spec"]["scaleTargetRef"]["name"] for h in hpas} == {
        d["metadata"]["name"] for d in worker_deployments(docs)
    }
    for hpa in hpas:
        _settings, hosted = _hosted(docs, hpa["spec"]["scaleTargetRef"]["name"], monkeypatch)
        ext = next(m["external"] for m in hpa["spec"]["metrics"] if m["type"] == "External")
        assert external[ext["metric"]["name"]] in recorded
        (expr,) = ext["metric"]["selector"]["matchExpressions"]
        assert (expr["key"], expr["operator"], sorted(expr["values"])) == ("model", "In", sorted(hosted))


# ------------------------------------------------------------------------------------------- secrets
def test_every_referenced_secret_is_one_the_secrets_kustomization_makes(
    rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    src = KUBE / "secrets"
    shutil.copytree(src, tmp_path / "secrets")
    for example in (tmp_path / "secrets").glob("*.env.example"):
        shutil.copy(example, example.with_suffix(""))
    made = {(s["metadata"]["name"], key) for s in render(tmp_path / "secrets") for key in s["data"]}
    auth_refs = {
        (ref["name"], ref["key"])
        for docs in rendered.values()
        for auth in of_kind(docs, "TriggerAuthentication")
        for ref in auth["spec"]["secretTargetRef"]
    }
    for overlay, docs in rendered.items():
        for where, name, key in secret_refs(docs):
            assert (name, key) in made, f"{overlay}: {where} needs secret {name}/{key}"
        assert not of_kind(docs, "Secret"), f"{overlay}: secrets are applied apart, never with an overlay"
    assert auth_refs <= made
    ignored = (src / ".gitignore").read_text(encoding="utf-8").split()
    assert "*.env" in ignored


def test_the_api_holds_no_worker_store_identity_nor_the_compile_cache_key(rendered: dict[str, list[Doc]]) -> None:
    """Workers load compiled code from compile-cache/: the internet-facing API holds neither the store identity that
    can write there nor the key that seals it; every worker holds both."""
    for overlay, docs in rendered.items():
        refs = {(where, name) for where, name, _key in secret_refs(docs)}
        api = {name for where, name in refs if where == "Deployment/genworker-api"}
        workers = {w for w, _ in refs if w.startswith("Deployment/genworker-worker")}
        assert api and workers, overlay
        assert "genworker-s3-api" in api and not api & {"genworker-s3", "genworker-compile-cache"}, overlay
        for worker in workers:
            held = {name for where, name in refs if where == worker}
            assert {"genworker-s3", "genworker-compile-cache"} <= held and "genworker-s3-api" not in held, worker

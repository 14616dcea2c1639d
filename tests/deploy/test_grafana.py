"""The fleet dashboard reads only metrics the workers export, recording rules deploy/prometheus
defines, or the exporters' metrics the deployment runs (tests/deploy/promql.py EXTERNAL)."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.deploy.kube import ROOT
from tests.deploy.promql import EXTERNAL, metric_names, worker_metric_names

DASHBOARD = ROOT / "deploy" / "grafana" / "genworker-fleet.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"


def _exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"]
            inner = re.fullmatch(r"label_values\((\w+), \w+\)", query)
            assert inner, query
            found.append((f"variable {var['name']}", inner.group(1)))
    return found


def test_every_dashboard_expression_reads_existing_names() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    known = worker_metric_names() | recorded | set(EXTERNAL)
    exprs = _exprs(dashboard)
    assert len(exprs) >= 15
    used: set[str] = set()
    for title, expr in exprs:
        names = metric_names(expr)
        assert names, f"{title}: {expr!r} reads no metric"
        assert names <= known, f"{title}: unknown {names - known} in {expr!r}"
        used |= names
    # The panels the issue asks for each have their data.
    for needed in ("genworker_jobs_total", "genworker:queue_wait:estimate_seconds", "genworker_stage_seconds_bucket"):
        assert needed in used or any(needed in e for _, e in exprs), needed
    assert "genworker_gpu_memory_bytes" in used and "genworker:job_failures:ratio_rate15m" in used


def test_the_dashboard_is_importable_json_with_unique_panel_ids() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "genworker-fleet"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]

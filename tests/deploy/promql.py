"""The metric names a PromQL expression reads, and the names that exist to be read.

A small lexer, not a PromQL parser: strings, durations, label matchers and grouping clauses are
removed, functions and keywords are dropped, and what is left are metric (or recording rule) names.
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from api.webhooks.metrics import WebhookMetrics
from worker.metrics import WorkerMetrics

# Metrics of the exporters the deployment runs beside the workers (deploy/kubernetes/redis-single:
# redis_exporter; GPU nodes: NVIDIA's dcgm-exporter) and Prometheus' own per-target series.
EXTERNAL = {
    "redis_stream_length": "redis_exporter --check-streams",
    "redis_memory_used_bytes": "redis_exporter",
    "redis_memory_max_bytes": "redis_exporter",
    "DCGM_FI_DEV_GPU_UTIL": "dcgm-exporter",
    "up": "Prometheus",
}

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "rate",
    "irate",
    "increase",
    "delta",
    "idelta",
    "deriv",
    "predict_linear",
    "resets",
    "changes",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "last_over_time",
    "quantile_over_time",
    "stddev_over_time",
    "present_over_time",
    "absent",
    "absent_over_time",
    "histogram_quantile",
    "label_replace",
    "label_join",
    "clamp",
    "clamp_min",
    "clamp_max",
    "abs",
    "ceil",
    "floor",
    "round",
    "sqrt",
    "exp",
    "ln",
    "log2",
    "log10",
    "scalar",
    "vector",
    "time",
    "timestamp",
    "sort",
    "sort_desc",
    "inf",
    "nan",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_RANGE = re.compile(r"\[[^\]]*\]")
_MATCHERS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# Grafana's template variables ($model, ${gpu_hour_usd}, $__rate_interval).
_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")


def metric_names(expr: str) -> set[str]:
    text = _STRING.sub(" ", expr)
    text = _VARIABLE.sub("1", text)
    text = _RANGE.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _NAME.finditer(text):
        word = match.group(0)
        before = text[match.start() - 1] if match.start() else " "
        if word in _KEYWORDS or before.isdigit() or before == ".":
            continue
        names.add(word)
    return names


def worker_metric_names() -> set[str]:
    """Every series name a worker exports (counters' ``_total``, histograms' ``_sum``/``_count``/``_bucket``)."""
    return _series_names(WorkerMetrics().registry)


def webhook_metric_names() -> set[str]:
    """Every series name a webhook sender exports (an API replica's /metrics, or ``webhooks serve``)."""
    return _series_names(WebhookMetrics().registry)


def _series_names(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_sum", "_count", "_bucket"))
        else:
            names.add(family.name)
    return names

"""deploy/grafana/recordsync.json: every query parses and selects a metric the daemon exports;
every per-merchant query filters on the merchant variable and keeps merchants apart."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from support.deployfiles import (
    DASHBOARD,
    exported_metric,
    promql_metric_names,
    promtool_check_exprs,
    unknown_metrics,
)

from recordsync.metrics import MERCHANT_LABEL, PROCESS_WIDE, MetricName, Metrics
from recordsync.service.daemon.observers import SyncMetricsObserver

# What a person on call must see (the list) and the metrics that show it.
MUST_SHOW = {
    "tail freshness": MetricName.TAIL_FRESHNESS,
    "records per second": MetricName.RECORDS_WRITTEN,
    "backfill progress": MetricName.SNAPSHOT_PROGRESS,
    "backfill time left": MetricName.SNAPSHOT_REMAINING,
    "rate-budget use": MetricName.RATE_BUDGET_REQUESTS,
    "rate-budget waits": MetricName.RATE_BUDGET_WAIT,
    "429s": MetricName.PLATFORM_RATE_LIMITED,
    "errors by kind": MetricName.ERRORS,
    "quarantined records": MetricName.RECORDS_QUARANTINED,
    "drift-check result": MetricName.DRIFT_ROWS_BEHIND,
    "warehouse write latency": MetricName.WAREHOUSE_WRITE_DURATION,
    "last commit": MetricName.LAST_COMMIT,
    # Issue 17: several merchants shared by several replicas.
    "lease held per merchant": MetricName.LEASE_HELD,
    "merchants held per replica": MetricName.MERCHANTS_HELD,
    "live replicas": MetricName.REPLICAS_LIVE,
}
# Grafana's variables, replaced by sample values so promtool can parse the queries.
GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "6h",
    "$job": "recordsync",
    "$instance": ".+",
    "$merchant_id": ".+",
}
MERCHANT_FILTER = f'{MERCHANT_LABEL}=~"$merchant_id"'
# Aggregation operators, with their ``by (...)`` list when there is one.
AGGREGATION = re.compile(
    r"\b(sum|min|max|avg|count|group|stddev|stdvar|topk|bottomk|quantile|count_values)\s*"
    r"(?:by\s*\(([^)]*)\))?\s*\("
)
GRID_WIDTH = 24


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            yield f"{panel['title']}/{target['refId']}", target


def _per_merchant(expr: str) -> set[str]:
    """The metrics ``expr`` selects that carry ``merchant_id``."""
    names = {exported_metric(name) for name in promql_metric_names(expr)}
    return {name for name in names if name is not None} - PROCESS_WIDE


def _exprs(dashboard: dict[str, Any]) -> dict[str, str]:
    """``{"panel title/refId": expr}`` for every query of every panel."""
    return {
        f"{panel['title']}/{target['refId']}": target["expr"]
        for panel in _panels(dashboard)
        for target in panel.get("targets", [])
    }


def test_dashboard_queries_only_metrics_the_daemon_exports(dashboard):
    exprs = _exprs(dashboard)
    assert exprs
    assert unknown_metrics(exprs.values()) == {}


def test_dashboard_shows_what_on_call_needs(dashboard):
    shown = {
        exported_metric(name)
        for expr in _exprs(dashboard).values()
        for name in promql_metric_names(expr)
    }
    missing = {topic for topic, metric in MUST_SHOW.items() if metric not in shown}
    assert missing == set()


def test_dashboard_queries_parse_with_promtool(dashboard, tmp_path):
    substituted = {}
    for key, expr in _exprs(dashboard).items():
        for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(variable, value)  # noqa: PLW2901 - substituted copy
        assert "$" not in expr, f"{key}: unknown variable in {expr}"
        substituted[key] = expr
    promtool_check_exprs(substituted, tmp_path)


def test_snapshot_panels_group_by_the_label_prometheus_stores(dashboard):
    """A metric label named ``job`` is stored as ``exported_job`` (``job`` is the target's)."""
    metrics = Metrics()
    SyncMetricsObserver(metrics.merchant("m-1")).windows_planned("rebuild", 10, 2)
    labels = {
        sample.name: set(sample.labels)
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == MetricName.SNAPSHOT_PROGRESS
    }[MetricName.SNAPSHOT_PROGRESS]
    (label,) = labels - {MERCHANT_LABEL}  # merchant_id: see the test below
    stored = "exported_job" if label in {"job", "instance"} else label
    snapshot_exprs = [
        expr
        for expr in _exprs(dashboard).values()
        if any(name.startswith("recordsync_snapshot_") for name in promql_metric_names(expr))
    ]
    assert snapshot_exprs
    for expr in snapshot_exprs:
        groups = [match[2] or "" for match in AGGREGATION.finditer(expr)]
        assert groups, expr
        for group in groups:
            assert stored in re.split(r"\s*,\s*", group), expr


def test_the_merchant_variable_selects_several_merchants_or_all(dashboard):
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    merchant = variables[MERCHANT_LABEL]
    assert merchant["multi"] is True
    assert merchant["includeAll"] is True
    assert merchant["allValue"] == ".+"  # every series that has the label
    found = re.fullmatch(r"label_values\((\w+)\{[^}]*\}, (\w+)\)", merchant["definition"])
    assert found, merchant["definition"]
    assert found[1] in _per_merchant(found[1])
    assert found[2] == MERCHANT_LABEL
    assert merchant["query"]["query"] == merchant["definition"]


def test_every_per_merchant_query_filters_and_keeps_merchants_apart(dashboard):
    checked = 0
    for key, target in _targets(dashboard):
        expr = target["expr"]
        if not _per_merchant(expr):
            continue  # the process: up, build_info, merchants held, live replicas
        checked += 1
        for metric, selector in re.findall(r"(recordsync_\w+)\{([^}]*)\}", expr):
            if exported_metric(metric) not in PROCESS_WIDE:
                assert MERCHANT_FILTER in selector, f"{key}: {metric} is not filtered"
        for match in AGGREGATION.finditer(expr):
            labels = re.split(r"\s*,\s*", match[2] or "")
            assert MERCHANT_LABEL in labels, f"{key}: {match[0]} adds merchants together"
        assert "{{merchant_id}}" in target["legendFormat"], key
    assert checked


def test_the_only_panels_without_merchants_show_the_process(dashboard):
    process_panels = {
        panel["title"]
        for panel in _panels(dashboard)
        if panel["type"] != "row"
        and not any(_per_merchant(target["expr"]) for target in panel["targets"])
    }
    assert process_panels == {"Scraped", "Version", "Merchants held per replica", "Live replicas"}


def test_panels_fit_the_grid_without_overlapping(dashboard):
    panels = list(_panels(dashboard))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= GRID_WIDTH, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_every_query_uses_the_datasource_and_filters_variables(dashboard):
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert {"datasource", "job", "instance", MERCHANT_LABEL} <= variables
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel.get("description"), f"{panel['title']}: say what it shows"
        for target in panel["targets"]:
            for selector in re.findall(r"recordsync_\w+\{([^}]*)\}", target["expr"]):
                assert 'job=~"$job"' in selector, target["expr"]
                assert 'instance=~"$instance"' in selector, target["expr"]
    assert dashboard["uid"] == "recordsync"

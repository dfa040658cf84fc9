"""deploy/prometheus: promtool checks and unit-tests every alert; runbook and code agree;
every alert about a sync is per merchant."""

from __future__ import annotations

import re
from typing import Any

import pytest
from support.deployfiles import (
    OPERATIONS,
    PROMETHEUS,
    promql_metric_names,
    run_tool,
    tool,
    unknown_metrics,
    yaml_document,
)

from recordsync.core import errors
from recordsync.metrics import MERCHANT_LABEL, MetricName, RoundEventMetricName

ALERTS = PROMETHEUS / "alerts.yml"
ALERT_TESTS = PROMETHEUS / "alerts.test.yml"
# The issue's list: freshness too old, sync stalled, rebuild started, drift found, records
# quarantined, authentication or clock-skew errors, instance down; and issue 17's merchant
# that no replica holds.
EXPECTED_ALERTS = {
    "RecordsyncFreshnessTooOld",
    "RecordsyncSyncStalled",
    "RecordsyncRebuildStarted",
    "RecordsyncDriftFound",
    "RecordsyncRecordsQuarantined",
    "RecordsyncAuthenticationFailed",
    "RecordsyncClockSkew",
    "RecordsyncDown",
    "RecordsyncMerchantNotHeld",
    # Issue 12: rounds announced by round-end notifications that never reached the warehouse.
    "RecordsyncRoundsAnnouncedMissing",
    # A merchant's sync that dies of an unexpected error and is restarted (a bug).
    "RecordsyncMerchantSyncFailing",
    # Records that carry a member recordsync does not know (kept in extra_fields).
    "RecordsyncRecordFieldUnknown",
}
# About the process, not a merchant's sync.
PROCESS_ALERTS = {"RecordsyncDown"}


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml_document(ALERTS)["groups"] for rule in group["rules"]]


def _github_anchor(heading: str) -> str:
    """The fragment GitHub (and most Markdown renderers) give a heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def _runbook_sections() -> dict[str, str]:
    """Alert sections of docs/operations.md: ``### Recordsync...`` headings -> their text."""
    text = OPERATIONS.read_text(encoding="utf-8")
    parts = re.split(r"^### (Recordsync\w+)\s*$", text, flags=re.MULTILINE)
    return {
        parts[i]: re.split(r"^#{1,3} ", parts[i + 1], flags=re.MULTILINE)[0]
        for i in range(1, len(parts), 2)
    }


def test_rules_pass_promtool_check():
    result = run_tool(tool("promtool"), "check", "rules", ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_pass_their_promtool_unit_tests():
    result = run_tool(tool("promtool"), "test", "rules", ALERT_TESTS.name, cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_are_the_ones_the_issue_lists():
    names = [rule["alert"] for rule in _rules()]
    assert len(names) == len(set(names))
    assert set(names) == EXPECTED_ALERTS


def test_every_alert_has_a_firing_and_a_silent_unit_test():
    firing: set[str] = set()
    silent: set[str] = set()
    for case in yaml_document(ALERT_TESTS)["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert firing == EXPECTED_ALERTS
    assert silent == EXPECTED_ALERTS


def test_alerts_query_only_metrics_the_daemon_exports():
    exprs = [rule["expr"] for rule in _rules()]
    assert unknown_metrics(exprs) == {}
    assert all(promql_metric_names(expr) for expr in exprs)


@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS - PROCESS_ALERTS))
def test_alert_is_per_merchant_and_names_it(alert):
    (rule,) = [rule for rule in _rules() if rule["alert"] == alert]
    # ``on (job)`` joins with ``up``, which has no merchant: only the aggregations count.
    groupings = re.findall(r"\bby\s*\(([^)]*)\)", rule["expr"])
    assert groupings, f"{alert}: aggregate by (job, merchant_id)"
    for grouping in groupings:
        assert MERCHANT_LABEL in re.split(r"\s*,\s*", grouping), f"{alert}: {grouping}"
    assert "{{ $labels.merchant_id }}" in rule["annotations"]["summary"]


@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS - PROCESS_ALERTS))
def test_alert_fires_per_merchant_in_its_unit_tests(alert):
    fired = [
        expected["exp_labels"]
        for case in yaml_document(ALERT_TESTS)["tests"]
        for check in case.get("alert_rule_test", [])
        if check["alertname"] == alert
        for expected in check["exp_alerts"]
    ]
    assert fired
    assert all(MERCHANT_LABEL in labels for labels in fired), fired


def test_a_merchant_nobody_holds_alerts_on_the_lease_gauges():
    (rule,) = [rule for rule in _rules() if rule["alert"] == "RecordsyncMerchantNotHeld"]
    expected = (
        "max by (job, merchant_id) (recordsync_lease_held) == 0 unless on (job, merchant_id) "
        "(max by (job, merchant_id) (recordsync_merchant_paused) == 1)"
    )
    assert " ".join(rule["expr"].split()) == expected
    assert rule["for"] == "5m"


def test_error_kinds_in_alerts_are_exception_classes():
    # recordsync_errors_total{kind} carries the exception class name (sync/resilience.py).
    kinds = {kind for rule in _rules() for kind in re.findall(r'kind="(\w+)"', rule["expr"])}
    assert kinds == {"AuthenticationError", "ClockSkewError"}
    for kind in kinds:
        assert issubclass(getattr(errors, kind), errors.FatalPlatformError)


@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS))
def test_alert_has_severity_and_a_runbook_section(alert):
    (rule,) = [rule for rule in _rules() if rule["alert"] == alert]
    assert rule["labels"]["severity"] in {"critical", "warning"}
    assert {"summary", "description", "runbook"} <= rule["annotations"].keys()
    assert rule["annotations"]["runbook"] == f"docs/operations.md#{_github_anchor(alert)}"
    section = _runbook_sections()[alert]
    for part in ("What it means", "What to look at", "What to do"):
        assert f"**{part}.**" in section, f"{alert}: no '{part}' in its runbook section"


def test_runbook_has_one_section_per_alert_and_no_other():
    assert sorted(_runbook_sections()) == sorted(EXPECTED_ALERTS)


def test_operations_doc_lists_every_metric():
    text = OPERATIONS.read_text(encoding="utf-8")
    assert {name for name in MetricName if f"`{name}`" not in text} == set()
    assert {name for name in RoundEventMetricName if f"`{name}`" not in text} == set()

"""deploy/grafana/business.json: every query of the dashboard runs on a PostgreSQL warehouse
filled with the simulator's data, with Grafana's macros expanded as Grafana expands them, and
returns rows."""

from __future__ import annotations

import json
import re
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from bi.bi_data import MERCHANT, dataset
from dbfixtures import SERVER_PARAMS

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "business.json"
POSTGRES = [param for param in SERVER_PARAMS if param.id == "postgres"]
PLUGIN = "grafana-postgresql-datasource"
VARIABLES = {"merchant": MERCHANT, "currency": "USDT"}


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def all_panels(panels: list[dict]) -> list[dict]:
    found = []
    for panel in panels:
        found.append(panel)
        found.extend(all_panels(panel.get("panels", [])))
    return found


def queries() -> list[tuple[str, str]]:
    """(where, SQL) of every panel target and every SQL template variable."""
    dashboard = load_dashboard()
    found = [
        (f"panel {panel['title']!r} {target['refId']}", target["rawSql"])
        for panel in all_panels(dashboard["panels"])
        for target in panel.get("targets", [])
    ]
    found += [
        (f"variable {variable['name']!r}", variable["query"])
        for variable in dashboard["templating"]["list"]
        if variable["type"] == "query"
    ]
    return found


def grafana_time(value) -> str:
    """How Grafana's PostgreSQL macros print a time: quoted RFC3339 UTC, whole seconds."""
    return f"'{value.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}'"


def expand(sql: str, *, start, end) -> str:
    """Grafana's macro and variable expansion for a single-valued text variable: the value
    with quotes doubled, placed where the query puts ``$name``."""
    sql = re.sub(
        r"\$__timeFilter\(([^)]+)\)",
        lambda m: f"{m[1]} BETWEEN {grafana_time(start)} AND {grafana_time(end)}",
        sql,
    )
    sql = sql.replace("$__timeFrom()", grafana_time(start)).replace(
        "$__timeTo()", grafana_time(end)
    )
    for name, value in VARIABLES.items():
        sql = re.sub(rf"\$\{{{name}\}}|\${name}\b", value.replace("'", "''"), sql)
    return sql


def test_the_dashboard_reads_postgres_through_its_datasource_variable():
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == PLUGIN
    panels = all_panels(dashboard["panels"])
    assert len({panel["id"] for panel in panels}) == len(panels)
    targets = [t for p in panels for t in p.get("targets", [])]
    assert targets
    for target in targets:
        assert target["datasource"] == {"type": PLUGIN, "uid": "${datasource}"}
        assert target["rawQuery"] is True
    titles = " ".join(panel["title"] for panel in panels).lower()
    for subject in ("gross gaming revenue", "top games", "currency", "open rounds", "freshness"):
        assert subject in titles, subject


def test_every_macro_and_variable_of_the_dashboard_is_known_to_the_expansion():
    start = dataset().projection_as_of
    for where, sql in queries():
        expanded = expand(sql, start=start, end=start)
        assert "$" not in expanded, (where, expanded)


@pytest.mark.parametrize("loaded", POSTGRES, indirect=True)
@pytest.mark.parametrize(("where", "sql"), queries(), ids=[where for where, _ in queries()])
def test_every_dashboard_query_runs_on_a_simulator_filled_warehouse_and_returns_rows(
    loaded, where, sql
):
    created = [record.created_at for record in dataset().records[MERCHANT]]
    start, end = min(created), max(created) + timedelta(seconds=1)
    with loaded.engine.connect() as conn:
        rows = conn.exec_driver_sql(expand(sql, start=start, end=end)).all()
    assert rows, where
    assert any(value is not None for row in rows for value in row), where

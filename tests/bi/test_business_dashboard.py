"""deploy/grafana/business.json: every query of the dashboard runs on a PostgreSQL warehouse
filled with the simulator's data, with Grafana's macros and variables expanded as Grafana
expands them, and returns rows; with one merchant or several selected, every row names one of
the selected merchants."""

from __future__ import annotations

import json
import re
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.bi_data import HUGE_MERCHANT, MERCHANT, OLD_MERCHANT, dataset
from support.dbfixtures import SERVER_PARAMS

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "business.json"
POSTGRES = [param for param in SERVER_PARAMS if param.id == "postgres"]
PLUGIN = "grafana-postgresql-datasource"
MERCHANTS = (MERCHANT, OLD_MERCHANT, HUGE_MERCHANT)
# Selections of the merchant_id variable; HUGE_MERCHANT has rounds in the time range too.
SELECTIONS = {"one-merchant": (MERCHANT,), "two-merchants": (MERCHANT, HUGE_MERCHANT)}


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def all_panels(panels: list[dict]) -> list[dict]:
    found = []
    for panel in panels:
        found.append(panel)
        found.extend(all_panels(panel.get("panels", [])))
    return found


def panel_queries() -> list[tuple[str, str]]:
    """(where, SQL) of every panel target."""
    return [
        (f"panel {panel['title']!r} {target['refId']}", target["rawSql"])
        for panel in all_panels(load_dashboard()["panels"])
        for target in panel.get("targets", [])
    ]


def queries() -> list[tuple[str, str]]:
    """(where, SQL) of every panel target and every SQL template variable."""
    return panel_queries() + [
        (f"variable {variable['name']!r}", variable["query"])
        for variable in load_dashboard()["templating"]["list"]
        if variable["type"] == "query"
    ]


def grafana_time(value) -> str:
    """How Grafana's PostgreSQL macros print a time: quoted RFC3339 UTC, whole seconds."""
    return f"'{value.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}'"


def quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def expand(sql: str, *, start, end, merchants: tuple[str, ...] = (MERCHANT,)) -> str:
    """Grafana's macro and variable expansion for SQL data sources: a multi-valued (or
    include-All) variable becomes its values quoted and joined by commas, a single-valued one
    its value with quotes doubled, placed where the query puts ``$name``."""
    sql = re.sub(
        r"\$__timeFilter\(([^)]+)\)",
        lambda m: f"{m[1]} BETWEEN {grafana_time(start)} AND {grafana_time(end)}",
        sql,
    )
    sql = sql.replace("$__timeFrom()", grafana_time(start)).replace(
        "$__timeTo()", grafana_time(end)
    )
    values = {"merchant_id": merchants, "currency": ("USDT",)}
    for variable in load_dashboard()["templating"]["list"]:
        name = variable["name"]
        if name not in values:
            continue
        if variable["multi"] or variable["includeAll"]:
            text = ",".join(quote(value) for value in values[name])
        else:
            (value,) = values[name]
            text = value.replace("'", "''")
        sql = re.sub(rf"\$\{{{name}\}}|\${name}\b", lambda _m, text=text: text, sql)
    return sql


def named_merchants(row) -> set[str]:
    """The merchants a result row names (a merchant column, or a series name it begins)."""
    return {
        merchant
        for merchant in MERCHANTS
        for value in row
        if isinstance(value, str) and (value == merchant or value.startswith(f"{merchant} "))
    }


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


@pytest.mark.parametrize("loaded", POSTGRES, indirect=True)
def test_games_and_providers_are_shown_by_name(loaded):
    """The panels about games show the catalogue's names, the game id beside them."""
    by_title = {panel["title"]: panel for panel in all_panels(load_dashboard()["panels"])}
    games = {game.game_id: game for game in dataset().games}
    created = [record.created_at for record in dataset().records[MERCHANT]]
    start, end = min(created), max(created) + timedelta(seconds=1)
    for title, name_of in (
        ("Top games by GGR ($currency)", lambda game: game.name),
        ("GGR by game provider ($currency)", lambda game: game.provider_name),
    ):
        sql = by_title[title]["targets"][0]["rawSql"]
        for currency in ("USD", "EUR"):
            expanded = expand(sql, start=start, end=end).replace("'USDT'", f"'{currency}'")
            with loaded.engine.connect() as conn:
                result = conn.exec_driver_sql(expanded)
                columns = list(result.keys())
                rows = result.all()
            assert rows, (title, currency)
            shown = {
                row[columns.index("game" if "games" in title.lower() else "provider")]
                for row in rows
            }
            assert shown <= {name_of(game) for game in games.values()}, (title, shown)


def test_every_macro_and_variable_of_the_dashboard_is_known_to_the_expansion():
    start = dataset().projection_as_of
    for where, sql in queries():
        expanded = expand(sql, start=start, end=start)
        assert "$" not in expanded, (where, expanded)


def test_the_merchant_variable_selects_several_merchants_or_all():
    variables = {v["name"]: v for v in load_dashboard()["templating"]["list"]}
    merchant = variables["merchant_id"]
    assert merchant["multi"] is True
    assert merchant["includeAll"] is True
    assert not merchant.get("allValue")  # All: every merchant, quoted, in IN (...)


@pytest.mark.parametrize(("where", "sql"), panel_queries(), ids=[w for w, _ in panel_queries()])
def test_every_panel_filters_on_the_selected_merchants_and_keeps_them_apart(where, sql):
    assert "merchant_id IN ($merchant_id)" in sql, where
    assert "'$merchant_id'" not in sql, where  # a quoted list inside quotes matches nothing
    select = sql.split("FROM", 1)[0]
    assert "merchant_id" in select, f"{where}: rows must say which merchant"
    if "GROUP BY" in sql:
        group_by = re.split(r"\b(?:HAVING|ORDER BY|LIMIT)\b", sql.split("GROUP BY", 1)[1])[0]
        assert "merchant_id" in group_by, f"{where}: adds merchants together"


@pytest.mark.parametrize("loaded", POSTGRES, indirect=True)
@pytest.mark.parametrize("selection", list(SELECTIONS), ids=list(SELECTIONS))
@pytest.mark.parametrize(("where", "sql"), queries(), ids=[where for where, _ in queries()])
def test_every_dashboard_query_runs_on_a_simulator_filled_warehouse_and_returns_rows(
    loaded, where, sql, selection
):
    merchants = SELECTIONS[selection]
    created = [record.created_at for record in dataset().records[MERCHANT]]
    start, end = min(created), max(created) + timedelta(seconds=1)
    with loaded.engine.connect() as conn:
        rows = conn.exec_driver_sql(expand(sql, start=start, end=end, merchants=merchants)).all()
    assert rows, where
    assert any(value is not None for row in rows for value in row), where
    if where.startswith("panel"):
        for row in rows:
            named = named_merchants(row)
            assert len(named) == 1, (where, row)
            assert named <= set(merchants), (where, row)


@pytest.mark.parametrize("loaded", POSTGRES, indirect=True)
def test_two_merchants_selected_show_side_by_side(loaded):
    (sql,) = [sql for where, sql in panel_queries() if "'Currency split'" in where]
    created = [record.created_at for record in dataset().records[MERCHANT]]
    start, end = min(created), max(created) + timedelta(seconds=1)
    expanded = expand(sql, start=start, end=end, merchants=SELECTIONS["two-merchants"])
    with loaded.engine.connect() as conn:
        rows = conn.exec_driver_sql(expanded).all()
    assert {merchant for row in rows for merchant in named_merchants(row)} == {
        MERCHANT,
        HUGE_MERCHANT,
    }

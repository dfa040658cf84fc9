"""PostgreSQL plans the summary views without reading ``records`` once every day is built, so
their cost does not grow with the table and no dashboard query crosses ``jit_above_cost``
(revision 0018: at twenty million rows the JIT alone took 400-550 ms of each query).
The plan is judged by its shape, so the table need not be big."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest
from sqlalchemy import text
from support.dbfixtures import BACKEND_PARAMS

from recordsync.warehouse import Warehouse

POSTGRES = [param for param in BACKEND_PARAMS if param.id == "postgres"]
QUERIES = {
    "a day's totals by currency": (
        "SELECT currency, SUM(rounds), SUM(ggr_amount) FROM daily_game_summary "
        "WHERE merchant_id = 'm' AND day = :day GROUP BY currency"
    ),
    "a player's month": (
        "SELECT * FROM daily_player_summary WHERE merchant_id = 'm' AND player_id = 'p' "
        "AND day >= :day ORDER BY day"
    ),
    "the named games": (
        "SELECT * FROM daily_game_summary_named WHERE merchant_id = 'm' AND day >= :day"
    ),
}


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


@pytest.mark.parametrize("warehouse_url", POSTGRES, indirect=True)
@pytest.mark.parametrize("query", QUERIES)
def test_a_summary_query_reads_no_records_and_is_planned_cheap(warehouse_url, query):
    warehouse = Warehouse.connect(warehouse_url)
    try:
        warehouse.migrate()
        with warehouse.engine.begin() as conn:
            # Rows enough for the planner to see a table worth reading (a page commit's
            # statement limit bounds the insert on a loaded machine: 20,000 rows).
            conn.execute(
                text(
                    "INSERT INTO records (merchant_id, record_id, revision, player_id, game_id, "
                    "currency, round_id, bet_amount, refund_amount, payout_amount, net_amount, "
                    "status, created_at, updated_at, synced_at) "
                    "SELECT 'm', 'r' || g, 1, 'p' || (g % 500), 'g' || (g % 20), 'EUR', "
                    "'round' || g, 1, 0, 1, 0, 'SETTLED', "
                    "now() - g * interval '1 minute', now(), now() "
                    "FROM generate_series(1, 20000) g"
                )
            )
            conn.execute(text("ANALYZE records"))
            found = conn.execute(
                text(f"EXPLAIN (FORMAT JSON) {QUERIES[query]}"), {"day": date(2026, 1, 1)}
            ).scalar_one()
    finally:
        warehouse.close()
    plan = (found if isinstance(found, list) else json.loads(found))[0]["Plan"]
    read = {node.get("Relation Name") for node in _nodes(plan)}
    assert "records" not in read, f"{query}: the plan reads records ({sorted(filter(None, read))})"
    assert plan["Total Cost"] < 1_000, f"{query}: planned at {plan['Total Cost']}"

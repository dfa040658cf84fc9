"""Which index each query of recordsync, of docs/bi.md and of the Grafana boards reads, by the
PostgreSQL planner's own word (``EXPLAIN``, no ANALYZE: nothing runs).

Point it at a warehouse of realistic size (``bench/scale.py`` builds one; its database is
dropped at its end, so run this while it measures), with the merchant it holds:

    .venv/bin/python bench/index_users.py URL [--merchant scale-merchant]
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import create_engine, pool, text

NOW: Final = datetime.now(UTC)
# (who asks, the query); :m is the merchant.
QUERIES: Final = (
    (
        "dry runs: count_created of a day",
        (
            "SELECT count(*) FROM records WHERE merchant_id = :m AND created_at >= :day "
            "AND created_at < :now"
        ),
    ),
    (
        "verify: record_ids_created of a day",
        (
            "SELECT record_id FROM records WHERE merchant_id = :m AND created_at >= :day "
            "AND created_at < :now"
        ),
    ),
    ("report: newest_record_day", "SELECT max(created_at) FROM records WHERE merchant_id = :m"),
    (
        "cross-check: rounds announced",
        "SELECT round_id FROM records WHERE merchant_id = :m AND round_id IN ('round-1', 'r')",
    ),
    (
        "drift check, verify, pages: stored revisions by id",
        (
            "SELECT record_id, revision FROM records WHERE merchant_id = :m "
            "AND record_id IN ('a', 'b')"
        ),
    ),
    (
        "docs/bi.md: a player's rounds, newest first",
        (
            "SELECT created_at, round_id FROM records WHERE merchant_id = :m "
            "AND player_id = 'player-4242' ORDER BY created_at DESC LIMIT 100"
        ),
    ),
    (
        "docs/bi.md, dashboards: daily_player_summary of a player",
        (
            "SELECT * FROM daily_player_summary WHERE merchant_id = :m AND player_id = 'player-42' "
            "AND day >= :month_day"
        ),
    ),
    (
        "docs/bi.md, Grafana: OPEN rounds in a time range",
        (
            "SELECT record_id FROM records WHERE merchant_id = :m AND status = 'OPEN' "
            "AND created_at >= :day AND created_at < :now ORDER BY created_at LIMIT 50"
        ),
    ),
    (
        "report, Grafana: daily_game_summary of 7 days",
        (
            "SELECT day, game_id, currency, rounds FROM daily_game_summary WHERE merchant_id = :m "
            "AND day >= :week_day"
        ),
    ),
)


def indexes_read(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(plan["Index Name"])
        if plan.get("Node Type") == "Seq Scan":
            found.add(f"seq scan of {plan.get('Relation Name')}")
        for value in plan.values():
            found |= indexes_read(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= indexes_read(value)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--merchant", default="scale-merchant")
    args = parser.parse_args()
    params = {
        "m": args.merchant,
        "now": NOW,
        "day": NOW - timedelta(days=1),
        "month_day": (NOW - timedelta(days=29)).date(),
        "week_day": (NOW - timedelta(days=6)).date(),
    }
    engine = create_engine(args.url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            for who, sql in QUERIES:
                plan = conn.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"), params).scalar_one()
                plan = json.loads(plan) if isinstance(plan, str) else plan
                print(f"{who:<58} {', '.join(sorted(indexes_read(plan)))}")
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

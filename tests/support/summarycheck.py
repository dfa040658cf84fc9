"""The summaries' truth: both daily summary views against a fresh aggregation of ``records``,
read at one moment, computed in Python with exact Decimals.

Shared by the rollup tests and the end-to-end comparisons with the platform's truth
(``synccheck.differences``), so that every run that ends equal to the platform also ends with
summaries equal to its rows.  On SQLite a sum over a group holding an amount without integer
units (beyond +-922337203685477.5807) is NULL, as docs/bi.md says; the fresh aggregation
follows that rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from decimal import Context, Decimal, Inexact, localcontext
from typing import Any

from sqlalchemy import Connection, select

from recordsync.warehouse import Warehouse
from recordsync.warehouse.bi.summaries import SUMMARY_VIEWS
from recordsync.warehouse.schema import records

COUNTS = ("rounds", "rounds_open", "rounds_settled", "rounds_void")
AMOUNTS = ("bet", "payout", "refund", "net")
_STATUS = {"OPEN": "rounds_open", "SETTLED": "rounds_settled", "VOID": "rounds_void"}
_EXACT = Context(prec=100, traps=[Inexact])


@contextmanager
def one_moment(warehouse: Warehouse) -> Iterator[Connection]:
    """A read transaction that sees one snapshot throughout (REPEATABLE READ on the servers;
    SQLite's read transaction in WAL mode is one already)."""
    engine = warehouse.engine
    if engine.dialect.name != "sqlite":
        engine = engine.execution_options(isolation_level="REPEATABLE READ")
    with engine.begin() as conn:
        yield conn


def fresh_aggregation(conn: Connection, merchant_id: str, subject: str) -> dict[tuple, dict]:
    """(day, subject, currency) -> the view's columns, from the merchant's rows."""
    columns = [records.c[name] for name in ("created_at", subject, "currency", "status")]
    columns += [records.c[f"{amount}_amount"] for amount in AMOUNTS]
    columns += [records.c[f"{amount}_units"] for amount in AMOUNTS]
    rows = conn.execute(select(*columns).where(records.c.merchant_id == merchant_id)).mappings()
    sqlite = conn.dialect.name == "sqlite"
    groups: dict[tuple, dict[str, Any]] = defaultdict(
        lambda: {
            **dict.fromkeys(COUNTS, 0),
            **{amount: Decimal(0) for amount in AMOUNTS},
            "unknown": set(),
        }
    )
    with localcontext(_EXACT):
        for row in rows:
            key = (row["created_at"].astimezone(UTC).date(), row[subject], row["currency"])
            group = groups[key]
            group["rounds"] += 1
            if row["status"] in _STATUS:
                group[_STATUS[row["status"]]] += 1
            for amount in AMOUNTS:
                group[amount] += row[f"{amount}_amount"]
                if sqlite and row[f"{amount}_units"] is None:
                    group["unknown"].add(amount)
        return {key: _columns(group) for key, group in groups.items()}


def _columns(group: dict[str, Any]) -> dict[str, Any]:
    unknown = group["unknown"]

    def known(value: Decimal, *amounts: str) -> Decimal | None:
        return None if unknown & set(amounts) else value

    bet, payout, refund = group["bet"], group["payout"], group["refund"]
    return {
        **{name: group[name] for name in COUNTS},
        "bet_amount": known(bet, "bet"),
        "payout_amount": known(payout, "payout"),
        "refund_amount": known(refund, "refund"),
        "net_amount": known(group["net"], "net"),
        "ggr_amount": known(bet - payout - refund, "bet", "payout", "refund"),
    }


def view_rows(conn: Connection, merchant_id: str, per: str) -> dict[tuple, dict]:
    view, subject = SUMMARY_VIEWS[per]
    found: dict[tuple, dict] = {}
    for row in conn.execute(select(view).where(view.c.merchant_id == merchant_id)).mappings():
        key = (row["day"], row[subject], row["currency"])
        assert key not in found, f"{view.name} repeats the group {key}"
        found[key] = {
            **{name: int(row[name]) for name in COUNTS},
            **{f"{amount}_amount": row[f"{amount}_amount"] for amount in (*AMOUNTS, "ggr")},
        }
    return found


def summary_differences(warehouse: Warehouse, merchant_id: str) -> list[str]:
    """Every way a daily summary view of the merchant differs from a fresh aggregation of
    its rows (empty when equal), read at one moment."""
    problems = []
    with one_moment(warehouse) as conn:
        for per, (view, subject) in SUMMARY_VIEWS.items():
            want = fresh_aggregation(conn, merchant_id, subject)
            got = view_rows(conn, merchant_id, per)
            problems += [
                f"{view.name} lacks {key}: fresh {want[key]}"
                for key in sorted(want.keys() - got.keys(), key=str)
            ]
            problems += [
                f"{view.name} has {key} that no row has: {got[key]}"
                for key in sorted(got.keys() - want.keys(), key=str)
            ]
            problems += [
                f"{view.name} {key}: view {got[key]} != fresh {want[key]}"
                for key in sorted(want.keys() & got.keys(), key=str)
                if got[key] != want[key]
            ]
    return problems


def assert_summaries_fresh(warehouse: Warehouse, merchant_id: str) -> None:
    problems = summary_differences(warehouse, merchant_id)
    assert not problems, f"{len(problems)} summary differences, first: {problems[:5]}"

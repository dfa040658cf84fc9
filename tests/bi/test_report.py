"""``recordsync report`` from the views: exact in every format, on every backend."""

from __future__ import annotations

import csv
import io
import json
from datetime import date
from decimal import Decimal

import pytest
from support.bi_data import (
    AMOUNTS,
    COUNTS,
    HUGE_MERCHANT,
    MERCHANT,
    OLD_DAY,
    OLD_MERCHANT,
    dataset,
    exact_text,
    expected_report,
)

from recordsync.core.errors import ConfigurationError
from recordsync.service.commands.report import ReportRow, report, report_merchants, summarize
from recordsync.warehouse import DailySummary, Warehouse
from recordsync.warehouse.reader import WarehouseReader


def run(store: Warehouse, merchant: str = MERCHANT, **options) -> str:
    out = io.StringIO()
    report(WarehouseReader(store), merchant, out=out, **options)
    return out.getvalue()


def as_text(sums: dict) -> dict:
    return {
        **{name: sums[name] for name in COUNTS},
        **{name: exact_text(sums[name]) for name in AMOUNTS},
    }


def test_json_by_game_equals_python_sums_over_the_last_days_of_data(loaded):
    document = json.loads(run(loaded, days=3, by="game", fmt="json"))
    first, last, expected = expected_report(dataset().records[MERCHANT], by="game", days=3)
    assert (document["first_day"], document["last_day"]) == (first.isoformat(), last.isoformat())
    assert (document["merchant_id"], document["by"], document["days"]) == (MERCHANT, "game", 3)
    # Highest GGR first within each currency.
    ordered = [(row["currency"], -Decimal(row["ggr_amount"])) for row in document["rows"]]
    assert ordered == sorted(ordered)
    got = {(row.pop("game_id"), row.pop("currency")): row for row in document["rows"]}
    for row in got.values():
        del row["game_name"], row["provider_name"]  # tests/bi/test_report_names.py
    assert got == {key: as_text(sums) for key, sums in expected.items()}


def test_json_totals_per_currency_equal_the_by_currency_rows(loaded):
    by_game = json.loads(run(loaded, days=2, by="game", fmt="json"))
    by_currency = json.loads(run(loaded, days=2, by="currency", fmt="json"))
    assert by_game["totals"] == by_currency["rows"] == by_currency["totals"]
    _, _, expected = expected_report(dataset().records[MERCHANT], by="currency", days=2)
    assert {
        row["currency"]: {k: v for k, v in row.items() if k != "currency"}
        for row in by_currency["rows"]
    } == {currency: as_text(sums) for (_, currency), sums in expected.items()}


def test_json_carries_the_freshness_of_the_data(loaded):
    freshness = json.loads(run(loaded, fmt="json"))["freshness"]
    assert freshness["phase"] == "tailing"
    assert freshness["last_projection_as_of"].endswith("Z")
    assert freshness["staleness_seconds"] >= 119


def test_csv_by_player_has_one_exact_line_per_player_and_currency(loaded):
    lines = run(loaded, days=7, by="player", fmt="csv").splitlines()
    assert lines[0] == (
        "player_id,currency,rounds,rounds_open,rounds_settled,rounds_void,"
        "bet_amount,payout_amount,refund_amount,net_amount,ggr_amount"
    )
    rows = list(csv.DictReader(lines))
    _, _, expected = expected_report(dataset().records[MERCHANT], by="player", days=7)
    got = {
        (row.pop("player_id"), row.pop("currency")): {
            name: int(value) if name in COUNTS else value for name, value in row.items()
        }
        for row in rows
    }
    assert got == {key: as_text(sums) for key, sums in expected.items()}


def test_the_table_shows_every_digit_the_period_and_the_freshness(loaded):
    shown = run(loaded, days=3, by="currency", fmt="table")
    first, last, expected = expected_report(dataset().records[MERCHANT], by="currency", days=3)
    for (_, currency), sums in expected.items():
        line = next(line for line in shown.splitlines() if f" {currency} " in line)
        for name in AMOUNTS:
            assert f"{sums[name]:,.4f}" in line, (currency, name)
    assert f"UTC days {first} to {last}: 3 days back from the newest day with data" in shown
    assert "data as of " in shown
    assert "phase tailing" in shown


def test_the_game_table_ends_with_totals_per_currency(loaded):
    shown = run(loaded, days=1, by="game", fmt="table")
    _, _, expected = expected_report(dataset().records[MERCHANT], by="currency", days=1)
    totals = [line for line in shown.splitlines() if "total" in line]
    assert len(totals) == len(expected)
    for (_, currency), sums in expected.items():
        (line,) = [line for line in totals if f" {currency} " in line]
        assert f"{sums['ggr_amount']:,.4f}" in line


def test_days_count_back_from_the_newest_data_day_not_from_the_clock(loaded):
    document = json.loads(run(loaded, OLD_MERCHANT, days=1, by="player", fmt="json"))
    assert document["first_day"] == document["last_day"] == OLD_DAY.date().isoformat()
    assert sum(row["rounds"] for row in document["rows"]) == 5


def test_a_merchant_without_records_gets_an_empty_report(loaded):
    document = json.loads(run(loaded, "nobody", fmt="json"))
    assert (document["first_day"], document["rows"], document["freshness"]) == (None, [], None)
    assert run(loaded, "nobody", fmt="csv").count("\n") == 1
    assert "no records for merchant 'nobody'" in run(loaded, "nobody", fmt="table")


def test_a_sum_sqlite_cannot_compute_exactly_is_shown_as_unknown(loaded):
    document = json.loads(run(loaded, HUGE_MERCHANT, days=1, by="game", fmt="json"))
    huge = next(row for row in document["rows"] if row["game_id"] == "edge-game")
    table = run(loaded, HUGE_MERCHANT, days=1, by="game", fmt="table")
    if loaded.engine.dialect.name == "sqlite":
        assert huge["bet_amount"] is None
        assert "n/a" in table
    else:
        assert huge["bet_amount"] == "100000000000000000000.5000"
        assert "100,000,000,000,000,000,000.5000" in table


# -- several merchants, grouped ---------------------------------------------------

GROUP = (MERCHANT, OLD_MERCHANT)


def run_grouped(store: Warehouse, merchants=GROUP, **options) -> str:
    out = io.StringIO()
    report_merchants(WarehouseReader(store), merchants, out=out, **options)
    return out.getvalue()


def without_staleness(document: dict) -> dict:
    """Staleness is read off the database clock at each call: it may tick between two."""
    if document["freshness"] is not None:
        document["freshness"].pop("staleness_seconds")
    return document


def test_several_merchants_in_json_are_one_document_each_in_order(loaded):
    grouped = json.loads(run_grouped(loaded, days=3, fmt="json"))["merchants"]
    singles = [json.loads(run(loaded, merchant, days=3, fmt="json")) for merchant in GROUP]
    assert [without_staleness(document) for document in grouped] == [
        without_staleness(document) for document in singles
    ]


def test_several_merchants_share_one_csv_with_a_leading_merchant_column(loaded):
    header, *rows = csv.reader(io.StringIO(run_grouped(loaded, days=3, by="player", fmt="csv")))
    singles = {
        merchant: list(
            csv.reader(io.StringIO(run(loaded, merchant, days=3, by="player", fmt="csv")))
        )
        for merchant in GROUP
    }
    assert header == ["merchant_id", *singles[MERCHANT][0]]
    assert rows == [[merchant, *row] for merchant in GROUP for row in singles[merchant][1:]]
    assert {row[0] for row in rows} == set(GROUP)


def test_several_merchants_get_a_table_each(loaded):
    table = run_grouped(loaded, days=3, by="currency", fmt="table")
    assert table.index(f"{MERCHANT}: rounds and money") < table.index(f"{OLD_MERCHANT}: rounds")


def test_one_merchant_grouped_is_exactly_the_single_report(loaded):
    for fmt in ("csv", "table"):
        assert run_grouped(loaded, [OLD_MERCHANT], fmt=fmt) == run(loaded, OLD_MERCHANT, fmt=fmt)


@pytest.mark.parametrize(
    "options",
    [{"by": "week"}, {"fmt": "xml"}, {"days": 0}, {"days": -3}],
    ids=["by", "format", "zero-days", "negative-days"],
)
def test_invalid_options_are_configuration_errors_naming_the_choices(tmp_path, options):
    store = Warehouse.connect(f"sqlite:///{tmp_path / 'none.db'}")
    try:
        with pytest.raises(ConfigurationError, match="report"):
            report(WarehouseReader(store), MERCHANT, out=io.StringIO(), **options)
        with pytest.raises(ConfigurationError, match="report"):
            report_merchants(WarehouseReader(store), GROUP, out=io.StringIO(), **options)
    finally:
        store.close()


def daily(subject: str, currency: str, ggr: str | None, rounds: int = 1) -> DailySummary:
    amount = None if ggr is None else Decimal(ggr)
    return DailySummary(
        day=date(2024, 3, 1),
        merchant_id=MERCHANT,
        subject=subject,
        currency=currency,
        rounds=rounds,
        rounds_open=0,
        rounds_settled=rounds,
        rounds_void=0,
        bet_amount=amount,
        payout_amount=Decimal(0),
        refund_amount=Decimal(0),
        net_amount=None if amount is None else -amount,
        ggr_amount=amount,
    )


def test_summarize_orders_by_currency_then_highest_ggr_and_unknown_last():
    rows = summarize(
        [
            daily("a", "USD", "5"),
            daily("b", "USD", None),
            daily("c", "USD", "7.5"),
            daily("a", "EUR", "-1"),
            daily("a", "USD", "0.0001"),
        ],
        by="game",
    )
    assert [(row.currency, row.subject, row.ggr_amount) for row in rows] == [
        ("EUR", "a", Decimal("-1.0000")),
        ("USD", "c", Decimal("7.5000")),
        ("USD", "a", Decimal("5.0001")),
        ("USD", "b", None),
    ]
    assert rows[2] == ReportRow(
        "a", "USD", 2, 0, 2, 0, *(Decimal(v) for v in ("5.0001", "0", "0", "-5.0001", "5.0001"))
    )


def test_summarize_never_rounds_a_sum():
    big = "99999999999999999999999999.9999"
    (row,) = summarize([daily("a", "USD", big), daily("b", "USD", big)], by="currency")
    assert row.ggr_amount == Decimal("199999999999999999999999999.9998")

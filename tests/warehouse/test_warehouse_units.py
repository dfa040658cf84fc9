"""Every amount is also kept as an exact integer of 10**-4 (what SQLite's views sum)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from alembic import command
from sqlalchemy import insert
from support.pages import commit_window_page
from support.warehouse_samples import MERCHANT, T0, WINDOW, make_record, stored_view

from recordsync.core.state import REBUILD_JOB
from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import _config, current_revision
from recordsync.warehouse.schema import records
from recordsync.warehouse.types import money_units

AMOUNTS = ("bet", "refund", "payout", "net")

# (amount, its units): the BIGINT edge is exact, one unit beyond it is NULL.
UNITS = [
    ("0", 0),
    ("-0.00", 0),
    ("0.0001", 1),
    ("-10.25", -102500),
    ("12", 120000),
    ("999999999999.9999", 9999999999999999),
    ("-1999999999999.9998", -19999999999999998),
    ("922337203685477.5807", 2**63 - 1),
    ("-922337203685477.5807", -(2**63 - 1)),
    ("922337203685477.5808", None),
    ("-99999999999999999999999999.9999", None),
]


@pytest.mark.parametrize(("amount", "units"), UNITS, ids=[amount for amount, _ in UNITS])
def test_money_units_are_the_amount_times_ten_thousand_or_none_beyond_bigint(amount, units):
    assert money_units(Decimal(amount)) == units


def write(store: Warehouse, *batch) -> None:
    commit_window_page(
        store,
        MERCHANT,
        REBUILD_JOB,
        WINDOW,
        records=list(batch),
        rejected=[],
        next_cursor="next",
        cursor_issued_at=T0,
        done=False,
        position="start",
    )


def units_of(row: dict) -> tuple:
    return tuple(row[f"{amount}_units"] for amount in AMOUNTS)


def test_the_upsert_stores_the_units_of_every_amount(rebuilding):
    batch = {
        f"r{i}": make_record(
            f"r{i}",
            bet_amount=Decimal(amount),
            refund_amount=Decimal(amount),
            payout_amount=Decimal(amount),
            net_amount=Decimal(amount),
        )
        for i, (amount, _) in enumerate(UNITS)
    }
    write(rebuilding, *batch.values())
    rows = rebuilding.records.fetch_records(MERCHANT)
    for record_id, (_, units) in zip(batch, UNITS, strict=True):
        assert units_of(rows[record_id]) == (units,) * 4


def test_a_higher_revision_replaces_the_units_and_a_lower_one_does_not(rebuilding):
    write(rebuilding, make_record(revision=1, payout_amount=Decimal("1.5")))
    write(rebuilding, make_record(revision=3, payout_amount=Decimal("7.0001")))
    write(rebuilding, make_record(revision=2, payout_amount=Decimal(99)))
    assert rebuilding.records.fetch_records(MERCHANT)["rec-1"]["payout_units"] == 70001


def test_upgrading_a_0001_warehouse_back_fills_the_units_exactly(warehouse_url):
    """A warehouse with rows from before revision 0003 gets their units in the migration."""
    store = Warehouse.connect(warehouse_url)
    config = _config()
    amounts = [amount for amount, _ in UNITS]
    old = [
        make_record(
            f"r{i}",
            bet_amount=Decimal(amount),
            refund_amount=Decimal(amount),
            payout_amount=Decimal(amount),
            net_amount=Decimal(amount),
        )
        for i, amount in enumerate(amounts)
    ]
    try:
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0001")
        with store.engine.begin() as conn:
            assert current_revision(conn) == "0001"
            conn.execute(
                insert(records),
                [
                    {"merchant_id": MERCHANT, **stored_view(record), "synced_at": T0}
                    for record in old
                ],
            )
        store.migrate()
        rows = store.records.fetch_records(MERCHANT)
    finally:
        store.close()
    for record, (_, units) in zip(old, UNITS, strict=True):
        assert units_of(rows[record.record_id]) == (units,) * 4, record.bet_amount

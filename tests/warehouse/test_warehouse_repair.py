"""``PageStore.repair_records`` (``recordsync verify --repair``): the platform's records written
back under the revision guards, fenced by an epoch when one is given, on every backend."""

from __future__ import annotations

from decimal import Decimal

import pytest
from support.warehouse_samples import make_record

from recordsync.core.errors import LeaseSupersededError
from recordsync.warehouse import Warehouse

MERCHANT = "m-repair"


def test_repair_never_lowers_a_revision_rewrites_only_the_same_one_and_is_fenced(
    warehouse: Warehouse,
):
    warehouse.pages.repair_records(
        MERCHANT, newer=[make_record("a", 3), make_record("b", 2)], same_revision=[]
    )
    warehouse.pages.repair_records(
        MERCHANT,
        newer=[make_record("a", 2, bet_amount=Decimal(99))],  # lower: ignored
        same_revision=[
            make_record("b", 2, payout_amount=Decimal("1.5")),  # still at 2: rewritten
            make_record("a", 2, payout_amount=Decimal(7)),  # moved on to 3: left alone
        ],
    )
    rows = warehouse.records.fetch_records(MERCHANT)
    assert (rows["a"]["revision"], rows["a"]["bet_amount"], rows["a"]["payout_amount"]) == (
        3,
        Decimal(10),
        Decimal(0),
    )
    assert (rows["b"]["revision"], rows["b"]["payout_amount"]) == (2, Decimal("1.5"))
    assert rows["b"]["payout_units"] == 15_000  # the exact units move with the amount

    # Fenced (one database per test is slow to make: the same one, another merchant).
    other = "m-repair-fenced"
    first = warehouse.fleet_session("verify-a")
    old = first.try_hold(other)
    assert old is not None
    first.close()
    second = warehouse.fleet_session("daemon-b")
    try:
        new = second.try_hold(other)
        assert new is not None
        assert new > old
        with pytest.raises(LeaseSupersededError):
            warehouse.pages.repair_records(
                other, newer=[make_record("a")], same_revision=[], epoch=old
            )
        assert warehouse.records.fetch_records(other) == {}
        warehouse.pages.repair_records(other, newer=[make_record("a")], same_revision=[], epoch=new)
        assert set(warehouse.records.fetch_records(other)) == {"a"}
    finally:
        second.close()

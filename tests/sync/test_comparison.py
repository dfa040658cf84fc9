"""The comparison behind ``recordsync verify``: what each pair of rows means (pure, no I/O)."""

from __future__ import annotations

from datetime import date, timedelta, timezone
from decimal import Decimal

import pytest
from msgspec.structs import replace
from support.warehouse_samples import make_record

from recordsync.sync.comparison import (
    DayTally,
    Difference,
    classify,
    compare_page,
    differing_fields,
    warehouse_only,
)

PLATFORM = make_record("r-1", revision=3)


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (None, Difference.MISSING),
        (replace(PLATFORM, revision=2), Difference.BEHIND),
        (replace(PLATFORM, revision=4), Difference.AHEAD),
        (replace(PLATFORM, bet_amount=Decimal("10.01")), Difference.DIFFERENT),
        (replace(PLATFORM, status="VOID"), Difference.DIFFERENT),
        (PLATFORM, None),
        # Money as exact decimals: the warehouse's NUMERIC(30,4) reads back 10.0000.
        (replace(PLATFORM, bet_amount=Decimal("10.0000")), None),
        # Times as instants: the same moment at another offset is equal.
        (
            replace(
                PLATFORM, created_at=PLATFORM.created_at.astimezone(timezone(timedelta(hours=2)))
            ),
            None,
        ),
    ],
    ids=[
        "missing",
        "behind",
        "ahead",
        "money",
        "status",
        "equal",
        "decimal-scale",
        "time-zone",
    ],
)
def test_classify_names_what_the_warehouse_row_is(stored, expected):
    assert classify(PLATFORM, stored) is expected


def test_differing_fields_names_each_field_and_never_the_key():
    stored = replace(PLATFORM, net_amount=Decimal("-9.99"), settled_at=PLATFORM.updated_at)
    assert differing_fields(PLATFORM, stored) == ("net_amount", "settled_at")


def test_compare_page_takes_the_highest_revision_a_page_lists_and_splits_the_repairs():
    newer = make_record("r-2", revision=5)
    page = [PLATFORM, make_record("r-2", revision=4), newer, make_record("r-3"), make_record("r-4")]
    stored = {
        "r-1": replace(PLATFORM, payout_amount=Decimal(1)),  # different at the same revision
        "r-2": make_record("r-2", revision=4),  # behind the page's highest revision, 5
        "r-3": make_record("r-3", revision=2),  # ahead
    }
    findings = compare_page(page, stored)
    assert sorted(findings.differences) == [
        (Difference.AHEAD, "r-3"),
        (Difference.BEHIND, "r-2"),
        (Difference.DIFFERENT, "r-1"),
        (Difference.MISSING, "r-4"),
    ]
    assert {record.record_id: record.revision for record in findings.newer} == {"r-2": 5, "r-4": 1}
    assert findings.same_revision == (PLATFORM,)


def test_warehouse_only_lists_rows_the_platform_did_not():
    assert warehouse_only(["a", "b"], ["c", "a", "d"]) == ["c", "d"]


def test_a_day_keeps_every_count_but_only_the_first_ids():
    tally = DayTally(date(2026, 3, 1))
    for n in range(8):
        tally.note(Difference.MISSING, f"r-{n}")
    tally.note(Difference.AHEAD, "r-x")
    assert tally.counts[Difference.MISSING] == 8
    assert tally.examples[Difference.MISSING] == [f"r-{n}" for n in range(5)]
    assert tally.faults == 8  # rows ahead are newer changes, not a fault

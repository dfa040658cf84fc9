"""The highest revision wins whatever the arrival order; money and times round-trip exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import create_engine, text
from support.pages import commit_window_page
from support.warehouse_samples import (
    MERCHANT,
    T0,
    WINDOW,
    make_record,
    row_view,
    start_rebuild_of_window,
    stored_view,
)

from recordsync.core.models import Record
from recordsync.core.state import REBUILD_JOB, TailPage
from recordsync.warehouse import Warehouse, WriteResult
from recordsync.warehouse.pages.upsert import all_fit, collapse, fits, split_unstorable, unstorable


def write(store: Warehouse, *records: Record) -> WriteResult:
    return commit_window_page(
        store,
        MERCHANT,
        REBUILD_JOB,
        WINDOW,
        records=list(records),
        rejected=[],
        next_cursor="next",
        cursor_issued_at=T0,
        done=False,
        position="start",
    )


def stored(store: Warehouse, record_id: str = "rec-1") -> dict:
    return store.records.fetch_records(MERCHANT)[record_id]


# -- pure: collapsing a batch -----------------------------------------------------------


def test_collapse_keeps_the_highest_revision_per_record_ordered_by_id():
    batch = [make_record("b", 2), make_record("a", 1), make_record("b", 7), make_record("b", 3)]
    assert [(r.record_id, r.revision) for r in collapse(batch)] == [("a", 1), ("b", 7)]


def test_collapse_keeps_the_first_of_equal_revisions():
    first, second = make_record("a", 4, status="OPEN"), make_record("a", 4, status="SETTLED")
    assert collapse([first, second]) == [first]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"record_id": "r" * 256}, "record_id: 256 characters"),
        ({"status": "S" * 65}, "status: 65 characters"),
        ({"player_id": "p\x00"}, "player_id: contains a NUL"),
        ({"revision": 2**63}, "revision: 9223372036854775808 exceeds"),
        ({"payout_amount": Decimal("1" + "0" * 26)}, "payout_amount: more than 26 integer"),
    ],
    ids=["long-id", "long-status", "nul", "huge-revision", "huge-amount"],
)
def test_unstorable_names_the_field_the_columns_cannot_hold(changes, reason):
    assert unstorable(make_record(**changes)).startswith(reason)


def test_a_sane_record_is_storable():
    widest = make_record(
        "r" * 255, 2**63 - 1, net_amount=Decimal("-99999999999999999999999999.9999")
    )
    assert unstorable(widest) is None


EDGES = {
    "record_id": st.sampled_from(["r", "r" * 255, "r" * 256, "r\x00"]),
    "player_id": st.sampled_from(["p", "p" * 256, "\x00"]),
    "round_id": st.sampled_from(["round", "o" * 255, "o" * 256]),
    "parent_round_id": st.sampled_from([None, "", "q" * 255, "q" * 256, "q\x00"]),
    "currency": st.sampled_from(["USD", "C" * 64, "C" * 65, "U\x00"]),
    "status": st.sampled_from(["OPEN", "S" * 64, "S" * 65]),
    "revision": st.sampled_from([0, 1, 2**63 - 1, 2**63]),
    "bet_amount": st.sampled_from(
        [Decimal(0), Decimal("0.0001"), Decimal("9" * 26 + ".9999"), Decimal("1" + "0" * 26)]
    ),
    "net_amount": st.sampled_from([Decimal("-10.00"), Decimal("-" + "9" * 26), Decimal("-1e26")]),
}


@given(st.lists(st.fixed_dictionaries({}, optional=EDGES).map(lambda c: make_record(**c))))
def test_a_page_fits_exactly_when_each_of_its_records_fits(batch):
    assert all_fit(batch) == all(map(fits, batch))
    fitting, unfit = split_unstorable(batch)
    assert fitting == [record for record in batch if fits(record)]
    assert [record for record, _ in unfit] == [record for record in batch if not fits(record)]


# -- on every backend -------------------------------------------------------------------


def test_a_lower_revision_after_a_higher_one_changes_nothing(rebuilding):
    higher = make_record(revision=5, status="SETTLED", payout_amount=Decimal("30.00"))
    write(rebuilding, higher)
    first = stored(rebuilding)
    write(rebuilding, make_record(revision=3, status="VOID", payout_amount=Decimal("1.00")))
    assert stored(rebuilding) == first
    assert row_view(first) == stored_view(higher)


def test_an_equal_revision_does_not_rewrite_the_row(rebuilding):
    write(rebuilding, make_record(revision=2, status="OPEN"))
    write(rebuilding, make_record(revision=2, status="SETTLED"))
    assert stored(rebuilding)["status"] == "OPEN"


def test_a_higher_revision_replaces_every_column(rebuilding):
    write(rebuilding, make_record(revision=1))
    synced_first = stored(rebuilding)["synced_at"]
    higher = make_record(
        revision=2,
        player_id="player-2",
        game_id="game-2",
        currency="EUR",
        round_id="round-2",
        parent_round_id="parent-2",
        bet_amount=Decimal("11.25"),
        refund_amount=Decimal("1.5"),
        payout_amount=Decimal(20),
        net_amount=Decimal("10.25"),
        status="SETTLED",
        created_at=T0 + timedelta(hours=2),
        settled_at=T0 + timedelta(hours=3),
        updated_at=T0 + timedelta(hours=4),
    )
    write(rebuilding, higher)
    row = stored(rebuilding)
    assert row_view(row) == stored_view(higher)
    assert row["synced_at"] >= synced_first


def test_a_batch_with_one_record_three_times_keeps_the_highest(rebuilding):
    revisions = [make_record(revision=n, status=f"S{n}") for n in (2, 9, 4)]
    result = write(rebuilding, *revisions)
    assert result == WriteResult(records=1, quarantined=0)
    assert row_view(stored(rebuilding)) == stored_view(revisions[1])


def test_identifiers_differing_only_in_case_or_trailing_space_are_different_records(
    rebuilding,
):
    write(rebuilding, make_record("abc"), make_record("ABC"), make_record("abc "))
    assert set(rebuilding.records.fetch_records(MERCHANT)) == {"abc", "ABC", "abc "}


def test_the_same_record_id_of_two_merchants_is_two_rows(rebuilding):
    rebuilding.state.start_rebuild(
        "merchant-2",
        change_cursor="c",
        anchor_at=T0,
        history_from=WINDOW.start,
        snapshot_to=WINDOW.end,
        windows=[],
    )
    write(rebuilding, make_record(revision=2))
    rebuilding.pages.commit_tail_page(
        "merchant-2",
        TailPage(
            records=[make_record(revision=1)],
            rejected=[],
            next_cursor="c2",
            last_sequence="1",
            projection_as_of=None,
            position="c",
        ),
    )
    assert stored(rebuilding)["revision"] == 2
    assert rebuilding.records.fetch_records("merchant-2")["rec-1"]["revision"] == 1


MONEY = [
    "999999999999.9999",
    "1999999999999.9998",
    "-1999999999999.9998",
    "99999999999999999999999999.9999",
    "-10.25",
    "0",
    "-0.00",
    "12",
    "12.50",
    "0.0001",
]


def test_money_round_trips_exactly(rebuilding):
    sent = {
        f"r{i}": make_record(
            f"r{i}",
            bet_amount=Decimal(amount),
            refund_amount=Decimal(amount),
            payout_amount=Decimal(amount),
            net_amount=Decimal(amount),
        )
        for i, amount in enumerate(MONEY)
    }
    write(rebuilding, *sent.values())
    rows = rebuilding.records.fetch_records(MERCHANT)
    exact_strings = rebuilding.engine.dialect.name == "sqlite"
    for record_id, amount in zip(sent, MONEY, strict=True):
        for name in ("bet_amount", "refund_amount", "payout_amount", "net_amount"):
            value = rows[record_id][name]
            assert isinstance(value, Decimal), (amount, name)
            assert value == Decimal(amount), (amount, name)
            if exact_strings:  # SQLite keeps the platform's string exactly as sent
                assert str(value) == amount, (amount, name)


def test_times_round_trip_as_aware_utc_with_microseconds(rebuilding):
    plus_five_thirty = timezone(timedelta(hours=5, minutes=30))
    record = make_record(
        created_at=datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=UTC),
        settled_at=datetime(2024, 3, 1, 5, 30, 0, 1000, tzinfo=plus_five_thirty),
        updated_at=datetime(2024, 3, 1, 0, 0, 0, 123456, tzinfo=UTC),
    )
    write(rebuilding, record)
    row = stored(rebuilding)
    assert row["created_at"] == record.created_at
    assert row["settled_at"] == datetime(2024, 3, 1, 0, 0, 0, 1000, tzinfo=UTC)
    assert row["updated_at"] == record.updated_at
    for name in ("created_at", "settled_at", "updated_at", "synced_at"):
        assert row[name].utcoffset() == timedelta(0)


def test_times_sort_chronologically_in_plain_sql(rebuilding):
    base = datetime(2024, 3, 1, 9, tzinfo=UTC)
    offsets = [timedelta(seconds=10), timedelta(microseconds=1), timedelta(0), timedelta(days=-400)]
    write(rebuilding, *(make_record(f"r{i}", created_at=base + o) for i, o in enumerate(offsets)))
    with rebuilding.engine.connect() as conn:
        order = conn.execute(text("SELECT record_id FROM records ORDER BY created_at")).scalars()
        assert list(order) == ["r3", "r2", "r1", "r0"]


def test_a_naive_time_is_refused_and_nothing_is_written(rebuilding):
    with pytest.raises(ValueError, match="naive datetime"):
        write(rebuilding, make_record(created_at=datetime(2024, 3, 1)))  # noqa: DTZ001
    assert rebuilding.records.fetch_records(MERCHANT) == {}


def test_unknown_statuses_are_stored_as_received(rebuilding):
    write(rebuilding, make_record(status="PARTIALLY_REFUNDED"))
    assert stored(rebuilding)["status"] == "PARTIALLY_REFUNDED"


def test_text_outside_the_basic_plane_round_trips(rebuilding):
    record = make_record("rec-\U0001f3b2", player_id="玩家-\U0001f600", status="ÖPEN")
    write(rebuilding, record)
    assert row_view(stored(rebuilding, record.record_id)) == stored_view(record)


def test_records_the_columns_cannot_hold_are_quarantined_and_the_rest_stored(rebuilding):
    result = write(
        rebuilding,
        make_record("ok"),
        make_record("x" * 300),
        make_record("big", payout_amount=Decimal("1e30")),
    )
    assert result == WriteResult(records=1, quarantined=2)
    assert set(rebuilding.records.fetch_records(MERCHANT)) == {"ok"}
    reasons = {item.record_id: item.reason for item in rebuilding.records.quarantined(MERCHANT)}
    assert reasons["x" * 300].startswith("record_id: 300 characters")
    assert reasons["big"].startswith("payout_amount: more than 26 integer digits")
    # Kept as JSON of what was parsed: exact amounts as text, times with their zone.
    (big,) = [item for item in rebuilding.records.quarantined(MERCHANT) if item.record_id == "big"]
    kept = json.loads(big.raw_json)
    assert kept["payout_amount"] == "1E+30"
    assert kept["bet_amount"] == "10.00"
    assert kept["created_at"] == "2024-03-01T00:01:00Z"
    assert kept["revision"] == 1


def test_a_warehouse_on_a_plain_injected_engine_stores_the_same(warehouse_url):
    engine = create_engine(warehouse_url)  # default paramstyle and session settings
    store = Warehouse(engine, clock=lambda: T0)
    try:
        store.migrate()
        start_rebuild_of_window(store)
        records = [make_record("a", 2, payout_amount=Decimal("0.0001")), make_record("b")]
        assert write(store, *records, make_record("a", 1)) == WriteResult(2, 0)
        rows = store.records.fetch_records(MERCHANT)
        assert [row_view(rows[r.record_id]) for r in records] == [stored_view(r) for r in records]
        assert rows["a"]["synced_at"] == T0
    finally:
        store.close()

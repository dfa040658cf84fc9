"""The revision history: every revision seen, once, committed with the rows; off costs nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from sqlalchemy import event
from support.warehouse_reads import fetch_revisions
from support.warehouse_samples import (
    MERCHANT,
    T0,
    WINDOW,
    make_change,
    make_record,
    snapshot_page,
    start_rebuild_of_window,
    tail_page,
)

from recordsync.core.state import TailPage
from recordsync.warehouse import Warehouse
from recordsync.warehouse.pages.revisions import SeenRevision, seen_revisions


def history(store: Warehouse) -> list[tuple[str, int, str | None]]:
    return [
        (row["record_id"], row["revision"], row["sequence"])
        for row in fetch_revisions(store, MERCHANT)
    ]


# -- pure: which revisions a page brings --------------------------------------------------


def test_a_snapshot_page_brings_its_records_without_sequence_ordered_by_key():
    b, a = make_record("b", 3), make_record("a", 1)
    assert seen_revisions([b, a]) == [SeenRevision(a, None, None), SeenRevision(b, None, None)]


def test_a_change_page_brings_every_revision_once_with_its_first_sequence():
    r1, r2 = make_record("a", 1), make_record("a", 2)
    changes = [make_change(r2, 11), make_change(r1, 10), make_change(r2, 12)]
    seen = seen_revisions([r2], changes)
    assert [(s.record.revision, s.sequence) for s in seen] == [(1, "10"), (2, "11")]
    assert seen[0].changed_at == changes[1].changed_at


def test_revisions_the_columns_cannot_hold_are_left_out():
    fitting = make_change(make_record("ok"), 2)
    seen = seen_revisions([], [make_change(make_record("x" * 300), 1), fitting])
    assert seen == [SeenRevision(fitting.record, "2", fitting.changed_at)]


def test_a_sequence_too_long_for_its_column_is_dropped_not_fatal():
    seen = seen_revisions([], [replace(make_change(make_record(), 1), sequence="9" * 5000)])
    assert seen[0].sequence is None
    assert seen[0].changed_at is not None


# -- on every backend ---------------------------------------------------------------------


def test_a_snapshot_page_appends_its_revisions_without_sequence(rebuilding):
    record = make_record("a", 2, payout_amount=Decimal("-0.0001"))
    snapshot_page(rebuilding, record, make_record("b", 1))
    rows = fetch_revisions(rebuilding, MERCHANT)
    assert [(r["record_id"], r["revision"], r["sequence"], r["changed_at"]) for r in rows] == [
        ("a", 2, None, None),
        ("b", 1, None, None),
    ]
    assert rows[0]["payout_amount"] == Decimal("-0.0001")
    assert rows[0]["created_at"] == record.created_at


def test_a_change_page_appends_every_revision_even_those_the_upsert_collapses(rebuilding):
    revisions = [make_record("a", n, payout_amount=Decimal(n)) for n in (1, 2, 3)]
    tail_page(rebuilding, *(make_change(r, 100 + r.revision) for r in revisions))
    assert history(rebuilding) == [("a", 1, "101"), ("a", 2, "102"), ("a", 3, "103")]
    rows = fetch_revisions(rebuilding, MERCHANT, "a")
    assert [row["payout_amount"] for row in rows] == [Decimal(1), Decimal(2), Decimal(3)]
    assert rows[0]["changed_at"] == revisions[0].updated_at + timedelta(milliseconds=5)
    assert rebuilding.records.fetch_records(MERCHANT)["a"]["revision"] == 3


def test_the_same_page_twice_appends_nothing_and_rewrites_nothing(rebuilding):
    page = [make_change(make_record("a", 1), 7), make_change(make_record("a", 2), 8)]
    tail_page(rebuilding, *page)
    first = fetch_revisions(rebuilding, MERCHANT)
    tail_page(rebuilding, *page)
    snapshot_page(rebuilding, make_record("a", 2, status="CHANGED?"))
    assert fetch_revisions(rebuilding, MERCHANT) == first


def test_a_revision_seen_in_a_snapshot_gets_its_sequence_from_the_change_stream(rebuilding):
    snapshot_page(rebuilding, make_record("a", 2))
    synced = fetch_revisions(rebuilding, MERCHANT)[0]["synced_at"]
    stream = make_change(make_record("a", 2), 42)
    tail_page(rebuilding, stream)
    (row,) = fetch_revisions(rebuilding, MERCHANT)
    assert (row["sequence"], row["changed_at"]) == ("42", stream.changed_at)
    assert row["synced_at"] == synced


def test_a_revision_seen_in_the_change_stream_keeps_its_sequence_after_a_snapshot(rebuilding):
    tail_page(rebuilding, make_change(make_record("a", 2), 42))
    snapshot_page(rebuilding, make_record("a", 2))
    tail_page(rebuilding, make_change(make_record("a", 2), 43))  # a repeat with a later sequence
    assert history(rebuilding) == [("a", 2, "42")]


def test_a_tail_page_without_its_changes_records_the_collapsed_records(rebuilding):
    tail_page(
        rebuilding,
        make_change(make_record("a", 1), 1),
        make_change(make_record("a", 2), 2),
        with_changes=False,
    )
    assert history(rebuilding) == [("a", 2, None)]


def test_unstorable_records_are_quarantined_and_absent_from_the_history(rebuilding):
    tail_page(rebuilding, make_change(make_record("x" * 300), 1), make_change(make_record("ok"), 2))
    assert history(rebuilding) == [("ok", 1, "2")]
    assert rebuilding.records.status(MERCHANT).quarantined == 1


def test_revisions_are_kept_per_merchant(rebuilding):
    snapshot_page(rebuilding, make_record("a", 1))
    rebuilding.state.start_rebuild(
        "merchant-2",
        change_cursor="c",
        anchor_at=T0,
        history_from=WINDOW.start,
        snapshot_to=WINDOW.end,
        windows=[],
    )
    rebuilding.pages.commit_tail_page(
        "merchant-2",
        TailPage(
            records=[make_record("a", 1)],
            rejected=[],
            next_cursor="c2",
            last_sequence="1",
            projection_as_of=None,
            position="c",
            changes=[make_change(make_record("a", 1), 1)],
        ),
    )
    assert history(rebuilding) == [("a", 1, None)]
    assert [row["sequence"] for row in fetch_revisions(rebuilding, "merchant-2")] == ["1"]


def test_keep_revisions_off_writes_no_history_and_never_touches_the_table(warehouse_url):
    store = Warehouse.connect(warehouse_url, keep_revisions=False)
    statements: list[str] = []
    try:
        store.migrate()
        assert store.pages.keep_revisions is False
        event.listen(
            store.engine,
            "before_cursor_execute",
            lambda _c, _cur, statement, *_rest: statements.append(statement),
        )
        start_rebuild_of_window(store)
        snapshot_page(store, make_record("a", 1))
        tail_page(store, make_change(make_record("a", 2), 5))
        assert store.records.fetch_records(MERCHANT)["a"]["revision"] == 2
        assert fetch_revisions(store, MERCHANT) == []
    finally:
        store.close()
    writes = [s for s in statements if "record_revisions" in s and not s.startswith("SELECT")]
    assert writes == []

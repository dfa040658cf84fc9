"""Staging a page: every revision once, flagged for the tables it goes to."""

from __future__ import annotations

from msgspec.structs import replace
from support.warehouse_samples import make_change, make_record

from recordsync.warehouse.pages.staging import StagedRevision, stage_page


def test_a_snapshot_page_stages_each_row_for_both_tables() -> None:
    a, b = make_record("a"), make_record("b")
    assert stage_page([a, b], (), keep_revisions=True) == [
        StagedRevision(a, None, None, is_top=True, in_history=True),
        StagedRevision(b, None, None, is_top=True, in_history=True),
    ]


def test_without_history_only_the_records_table_gets_rows() -> None:
    a = make_record("a")
    staged = stage_page([a], [make_change(a, 1)], keep_revisions=False)
    assert staged == [StagedRevision(a, None, None, is_top=True, in_history=False)]


def test_a_change_page_stages_every_revision_and_marks_the_highest() -> None:
    r1 = make_record("a", revision=1)
    r2 = replace(r1, revision=2)
    changes = [make_change(r1, 10), make_change(r2, 11), make_change(r2, 11)]  # a repeated change
    staged = stage_page([r2], changes, keep_revisions=True)
    assert [(s.record.revision, s.sequence, s.is_top, s.in_history) for s in staged] == [
        (1, "10", False, True),
        (2, "11", True, True),
    ]


def test_a_top_row_without_a_change_goes_to_records_only() -> None:
    a, b = make_record("a"), make_record("b")
    staged = stage_page([a, b], [make_change(a, 1)], keep_revisions=True)
    assert [(s.record.record_id, s.is_top, s.in_history) for s in staged] == [
        ("a", True, True),
        ("b", True, False),
    ]

"""Several snapshot pages in one transaction (the sync's group commits), on every backend:
each page moves its own window's cursor, and the transaction lands whole or not at all."""

from __future__ import annotations

import pytest
from support.warehouse_samples import (
    MERCHANT,
    T0,
    make_record,
    start_rebuild_of_window,
    windows,
)

from recordsync.core.state import REBUILD_JOB, Phase, Window, WindowPage
from recordsync.warehouse import WriteResult


def page(window: Window, *record_ids: str, done: bool = False, revision: int = 1) -> WindowPage:
    return WindowPage(
        job=REBUILD_JOB,
        window=window,
        records=[make_record(record_id, revision=revision) for record_id in record_ids],
        rejected=[],
        next_cursor=None if done else f"after-{record_ids[-1] if record_ids else 'none'}",
        cursor_issued_at=T0,
        done=done,
        position="first",
    )


def test_each_page_moves_its_own_window_and_the_last_one_finishes_the_rebuild(warehouse):
    plan = windows(3)
    start_rebuild_of_window(warehouse, plan)
    results = warehouse.pages.commit_window_pages(
        MERCHANT,
        [
            page(plan[0], "a", "b"),
            page(plan[1], "c", done=True),
            page(plan[0], "d", done=True),
            page(plan[2], done=True),
        ],
    )
    assert [result.records for result in results] == [2, 1, 1, 0]
    assert all(isinstance(result, WriteResult) for result in results)
    progress = {item.window: item for item in warehouse.state.load_windows(MERCHANT, REBUILD_JOB)}
    assert [(progress[w].cursor, progress[w].done, progress[w].records) for w in plan] == [
        (None, True, 3),
        (None, True, 1),
        (None, True, 0),
    ]
    assert set(warehouse.records.fetch_records(MERCHANT)) == {"a", "b", "c", "d"}
    state = warehouse.state.load_state(MERCHANT)
    assert state is not None
    assert state.phase is Phase.TAILING


def test_a_page_that_cannot_be_stored_takes_its_whole_group_back(warehouse):
    plan = windows(2)
    start_rebuild_of_window(warehouse, plan)
    unknown = Window(plan[0].start, plan[0].end - (plan[0].end - plan[0].start) / 2)
    with pytest.raises(LookupError, match="no window"):
        warehouse.pages.commit_window_pages(
            MERCHANT, [page(plan[0], "a"), page(plan[1], "b"), page(unknown, "c")]
        )
    assert warehouse.records.fetch_records(MERCHANT) == {}
    progress = warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
    assert all(item.cursor is None and item.records == 0 for item in progress)


def test_pages_of_one_group_keep_the_highest_revision_whatever_their_order(warehouse):
    plan = windows(2)
    start_rebuild_of_window(warehouse, plan)
    warehouse.pages.commit_window_pages(
        MERCHANT, [page(plan[0], "a", revision=3), page(plan[1], "a", revision=2)]
    )
    assert warehouse.records.fetch_records(MERCHANT)["a"]["revision"] == 3

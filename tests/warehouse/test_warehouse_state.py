"""Sync state, snapshot windows, the quarantine and status, on every backend."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from support.dbfixtures import SERVER_PARAMS
from support.lockwaits import bound_lock_waits
from support.pages import commit_window_page
from support.warehouse_samples import DAY, MERCHANT, T0, make_record, windows

from recordsync.core.state import REBUILD_JOB, Phase, TailPage, Window, backfill_job
from recordsync.platform.parsing import parse_records_page
from recordsync.warehouse import JobStatus, Warehouse, WriteResult, sync_state
from recordsync.warehouse.connection import side_by_side_writer

LONG_CURSOR = "c" * 4096
SEQUENCE_30 = "123456789012345678901234567890"


def rebuild(store: Warehouse, plan: list[Window], cursor: str = "anchor-cursor"):
    return store.state.start_rebuild(
        MERCHANT,
        change_cursor=cursor,
        anchor_at=T0,
        history_from=plan[0].start if plan else T0,
        snapshot_to=plan[-1].end if plan else T0,
        windows=plan,
    )


def window_page(store: Warehouse, window: Window, *, job: str = REBUILD_JOB, done=False, **kw):
    arguments = {
        "records": [],
        "rejected": [],
        "next_cursor": None if done else "next",
        "cursor_issued_at": T0,
        "position": "first",
    }
    return commit_window_page(store, MERCHANT, job, window, done=done, **(arguments | kw))


def tail_page(store: Warehouse, **kw):
    arguments = {
        "records": [],
        "rejected": [],
        "next_cursor": "tail-2",
        "last_sequence": "7",
        "projection_as_of": T0 + DAY,
        "position": "tail-1",
    }
    return store.pages.commit_tail_page(MERCHANT, TailPage(**(arguments | kw)))


def test_start_rebuild_creates_the_state_and_the_windows_in_order(warehouse):
    plan = windows(3)
    state = rebuild(warehouse, list(reversed(plan)), cursor=LONG_CURSOR)
    assert state.phase is Phase.SNAPSHOT
    assert state.rebuilds == 0
    assert state.change_cursor == LONG_CURSOR
    assert (state.anchor_at, state.last_sequence, state.last_projection_as_of) == (T0, None, None)
    assert warehouse.state.load_state(MERCHANT) == state
    progress = warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
    assert [p.window for p in progress] == plan
    assert all(p.cursor is None and not p.done and p.records == 0 for p in progress)


def test_start_rebuild_again_keeps_rows_counts_rebuilds_and_replaces_windows(warehouse):
    first_plan = windows(2)
    rebuild(warehouse, first_plan)
    window_page(warehouse, first_plan[0], records=[make_record()])
    tail_page(warehouse)
    second_plan = windows(1, start=T0 - 10 * DAY)
    state = rebuild(warehouse, second_plan, cursor="anchor-2")
    assert (state.rebuilds, state.phase, state.change_cursor) == (1, Phase.SNAPSHOT, "anchor-2")
    assert state.last_sequence is None
    assert [p.window for p in warehouse.state.load_windows(MERCHANT, REBUILD_JOB)] == second_plan
    assert set(warehouse.records.fetch_records(MERCHANT)) == {"rec-1"}
    assert rebuild(warehouse, second_plan).rebuilds == 2


def test_start_rebuild_without_windows_is_tailing_at_once(warehouse):
    assert rebuild(warehouse, []).phase is Phase.TAILING
    assert warehouse.state.load_windows(MERCHANT, REBUILD_JOB) == []


def test_start_rebuild_refuses_overlapping_starts_and_empty_windows(warehouse):
    with pytest.raises(ValueError, match="share a start"):
        rebuild(warehouse, [Window(T0, T0 + DAY), Window(T0, T0 + 2 * DAY)])
    with pytest.raises(ValueError, match="empty window"):
        rebuild(warehouse, [Window(T0, T0)])
    assert warehouse.state.load_state(MERCHANT) is None


def test_a_window_page_stores_rows_and_moves_that_windows_cursor(warehouse):
    plan = windows(2)
    rebuild(warehouse, plan)
    issued = T0 + timedelta(milliseconds=5)
    result = window_page(
        warehouse,
        plan[1],
        records=[make_record("a"), make_record("b")],
        next_cursor=LONG_CURSOR,
        cursor_issued_at=issued,
    )
    assert result == WriteResult(records=2, quarantined=0)
    untouched, moved = warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
    assert (moved.cursor, moved.cursor_issued_at, moved.done, moved.records) == (
        LONG_CURSOR,
        issued,
        False,
        2,
    )
    assert (untouched.cursor, untouched.records) == (None, 0)
    assert set(warehouse.records.fetch_records(MERCHANT)) == {"a", "b"}


def test_the_phase_becomes_tailing_with_the_last_rebuild_window(warehouse):
    plan = windows(2)
    rebuild(warehouse, plan)
    window_page(warehouse, plan[1], done=True)
    assert warehouse.state.load_state(MERCHANT).phase is Phase.SNAPSHOT
    window_page(warehouse, plan[0])
    assert warehouse.state.load_state(MERCHANT).phase is Phase.SNAPSHOT
    window_page(warehouse, plan[0], done=True)
    assert warehouse.state.load_state(MERCHANT).phase is Phase.TAILING
    assert all(
        p.done and p.cursor is None for p in warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
    )


def test_a_page_for_an_unknown_window_raises_and_writes_nothing(warehouse):
    plan = windows(1)
    rebuild(warehouse, plan)
    shifted = Window(plan[0].start, plan[0].end + timedelta(microseconds=1))
    with pytest.raises(LookupError, match="no window"):
        window_page(warehouse, shifted, records=[make_record()])
    assert warehouse.records.fetch_records(MERCHANT) == {}


def test_restart_window_forgets_the_cursor_and_keeps_the_rows(warehouse):
    plan = windows(1)
    rebuild(warehouse, plan)
    window_page(warehouse, plan[0], records=[make_record()])
    warehouse.state.restart_window(MERCHANT, REBUILD_JOB, plan[0])
    (progress,) = warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
    assert (progress.cursor, progress.cursor_issued_at, progress.done) == (None, None, False)
    assert set(warehouse.records.fetch_records(MERCHANT)) == {"rec-1"}
    with pytest.raises(LookupError):
        warehouse.state.restart_window(MERCHANT, "backfill:none", plan[0])


def test_split_window_ends_the_window_where_its_pieces_begin_in_one_transaction(warehouse):
    plan = windows(2)
    rebuild(warehouse, plan)
    window_page(warehouse, plan[0], records=[make_record()])
    at = plan[0].start + timedelta(hours=10)
    middle = at + (plan[0].end - at) / 2
    pieces = [Window(at, middle), Window(middle, plan[0].end)]
    warehouse.state.split_window(MERCHANT, REBUILD_JOB, plan[0], pieces)
    progress = warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
    assert [p.window for p in progress] == [Window(plan[0].start, at), *pieces, plan[1]]
    cut = progress[0]
    assert (cut.done, cut.cursor, cut.cursor_issued_at, cut.records) == (True, None, None, 1)
    assert [(p.done, p.cursor, p.records) for p in progress[1:3]] == [(False, None, 0)] * 2
    # The pieces are still to read: the rebuild is not finished.
    assert warehouse.state.load_state(MERCHANT).phase is Phase.SNAPSHOT
    with pytest.raises(ValueError, match="cover"):
        warehouse.state.split_window(MERCHANT, REBUILD_JOB, plan[1], [Window(at, middle)])
    with pytest.raises(LookupError):
        warehouse.state.split_window(MERCHANT, REBUILD_JOB, plan[0], pieces)
    assert len(warehouse.state.load_windows(MERCHANT, REBUILD_JOB)) == 4


def test_carry_window_ends_the_window_and_joins_its_rest_to_the_next_in_one_transaction(
    warehouse,
):
    start = T0 - 3 * DAY
    plan = [Window(start + n * DAY / 2, start + (n + 1) * DAY / 2) for n in range(3)]
    rebuild(warehouse, plan)
    window_page(warehouse, plan[0], records=[make_record()])
    at = plan[0].end - timedelta(hours=2)
    joined = Window(at, plan[1].end)
    with pytest.raises(ValueError, match="cover"):
        warehouse.state.carry_window(MERCHANT, REBUILD_JOB, plan[0], plan[2], joined)
    warehouse.state.carry_window(MERCHANT, REBUILD_JOB, plan[0], plan[1], joined)
    progress = warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
    assert [p.window for p in progress] == [Window(plan[0].start, at), joined, plan[2]]
    cut = progress[0]
    assert (cut.done, cut.cursor, cut.cursor_issued_at, cut.records) == (True, None, None, 1)
    assert (progress[1].done, progress[1].cursor, progress[1].records) == (False, None, 0)
    assert warehouse.state.load_state(MERCHANT).phase is Phase.SNAPSHOT
    # A window a chain has begun is never carried into, and a failed carry changes nothing.
    window_page(warehouse, plan[2], records=[make_record("rec-2")])
    begun = warehouse.state.load_windows(MERCHANT, REBUILD_JOB)
    with pytest.raises(LookupError):
        warehouse.state.carry_window(
            MERCHANT, REBUILD_JOB, joined, plan[2], Window(joined.end - DAY / 4, plan[2].end)
        )
    assert warehouse.state.load_windows(MERCHANT, REBUILD_JOB) == begun


def test_ensure_job_registers_a_backfill_once_and_leaves_the_sync_state_alone(warehouse):
    plan = windows(3)
    job = backfill_job(plan[0].start, plan[-1].end)
    first = warehouse.state.ensure_job(MERCHANT, job, plan)
    window_page(warehouse, plan[0], job=job, done=True, records=[make_record()])
    again = warehouse.state.ensure_job(MERCHANT, job, windows(5))
    assert [p.window for p in first] == [p.window for p in again] == plan
    assert again[0].done
    assert again[0].records == 1
    assert warehouse.state.load_state(MERCHANT) is None
    with pytest.raises(ValueError, match="start_rebuild"):
        warehouse.state.ensure_job(MERCHANT, REBUILD_JOB, plan)


def test_finishing_a_backfill_does_not_finish_the_rebuild(warehouse):
    rebuild(warehouse, windows(1))
    plan = windows(1, start=T0 - 30 * DAY)
    job = backfill_job(plan[0].start, plan[0].end)
    warehouse.state.ensure_job(MERCHANT, job, plan)
    window_page(warehouse, plan[0], job=job, done=True)
    assert warehouse.state.load_state(MERCHANT).phase is Phase.SNAPSHOT


def test_a_tail_page_stores_rows_and_moves_the_change_cursor(warehouse):
    rebuild(warehouse, [])
    result = tail_page(
        warehouse,
        records=[make_record(revision=3), make_record(revision=2)],
        next_cursor=LONG_CURSOR,
        last_sequence=SEQUENCE_30,
        projection_as_of=T0 + DAY,
    )
    assert result == WriteResult(records=1, quarantined=0)
    state = warehouse.state.load_state(MERCHANT)
    assert (state.change_cursor, state.last_sequence) == (LONG_CURSOR, SEQUENCE_30)
    assert state.last_projection_as_of == T0 + DAY
    assert state.last_commit_at is not None
    assert warehouse.records.fetch_records(MERCHANT)["rec-1"]["revision"] == 3


def test_an_empty_tail_page_keeps_the_last_sequence(warehouse):
    rebuild(warehouse, [])
    tail_page(warehouse, last_sequence=SEQUENCE_30)
    tail_page(warehouse, next_cursor="tail-3", last_sequence=None, projection_as_of=None)
    state = warehouse.state.load_state(MERCHANT)
    assert (state.change_cursor, state.last_sequence) == ("tail-3", SEQUENCE_30)
    assert state.last_projection_as_of == T0 + DAY


def test_a_sequence_longer_than_its_column_is_kept_out_not_a_failed_commit(warehouse):
    rebuild(warehouse, [])
    tail_page(warehouse, last_sequence=SEQUENCE_30)
    tail_page(warehouse, next_cursor="tail-3", last_sequence="9" * 5000)  # any length
    state = warehouse.state.load_state(MERCHANT)
    assert (state.change_cursor, state.last_sequence) == ("tail-3", SEQUENCE_30)


def test_a_tail_page_without_sync_state_raises_and_writes_nothing(warehouse):
    with pytest.raises(LookupError, match="no sync state"):
        tail_page(warehouse, records=[make_record()])
    assert warehouse.records.fetch_records(MERCHANT) == {}


def bad_page():
    good = {
        "record_id": "good",
        "revision": 1,
        "player_id": "p",
        "game_id": "g",
        "currency": "USD",
        "round_id": "r",
        "parent_round_id": None,
        "bet_amount": "1.00",
        "refund_amount": "0",
        "payout_amount": "0",
        "net_amount": "-1.00",
        "status": "OPEN",
        "created_at": "2024-03-01T00:00:00.000Z",
        "settled_at": None,
        "updated_at": "2024-03-01T00:00:00.000Z",
    }
    float_money = good | {"record_id": "float-money", "bet_amount": 1.5}
    nul_id = good | {"record_id": "nul\x00id", "revision": "1"}
    page = {"items": [good, float_money, "not an object", nul_id], "has_more": True}
    return parse_records_page(page | {"next_cursor": "c2", "snapshot_watermark": "9"})


def test_rejected_items_are_quarantined_with_raw_json_and_reason_in_the_same_commit(warehouse):
    plan = windows(1)
    rebuild(warehouse, plan)
    page = bad_page()
    result = window_page(warehouse, plan[0], records=page.records, rejected=page.rejected)
    assert result == WriteResult(records=1, quarantined=3)
    items = warehouse.records.quarantined(MERCHANT)
    assert [item.position for item in items] == ["first#3", "first#2", "first#1"]
    assert all(item.source == REBUILD_JOB for item in items)
    by_position = {item.position: item for item in items}
    float_money = by_position["first#1"]
    assert float_money.record_id == "float-money"
    assert float_money.reason.startswith("bet_amount")
    assert orjson.loads(float_money.raw_json)["bet_amount"] == 1.5
    assert by_position["first#2"].record_id is None
    assert orjson.loads(by_position["first#2"].raw_json) == "not an object"
    assert by_position["first#3"].record_id == "nul\ufffdid"  # a NUL cannot be stored
    assert orjson.loads(by_position["first#3"].raw_json)["record_id"] == "nul\x00id"
    assert set(warehouse.records.fetch_records(MERCHANT)) == {"good"}
    assert len(warehouse.records.quarantined(MERCHANT, limit=2)) == 2


def test_tail_quarantine_is_marked_as_from_the_tail(warehouse):
    rebuild(warehouse, [])
    tail_page(warehouse, rejected=bad_page().rejected, position="tail-cursor-1")
    assert {item.source for item in warehouse.records.quarantined(MERCHANT)} == {"tail"}
    assert warehouse.records.quarantined(MERCHANT)[-1].position == "tail-cursor-1#1"


def test_status_counts_windows_rows_and_quarantine_per_merchant(warehouse):
    plan = windows(3)
    rebuild(warehouse, plan)
    job = backfill_job(T0 - 40 * DAY, T0 - 39 * DAY)
    warehouse.state.ensure_job(MERCHANT, job, [Window(T0 - 40 * DAY, T0 - 39 * DAY)])
    page = bad_page()
    window_page(warehouse, plan[0], done=True, records=page.records, rejected=page.rejected)
    window_page(warehouse, plan[1], records=[make_record("x"), make_record("y")])
    status = warehouse.records.status(MERCHANT)
    assert status.state == warehouse.state.load_state(MERCHANT)
    assert status.jobs == (
        JobStatus(job=job, windows_done=0, windows_total=1, records=0),
        JobStatus(job=REBUILD_JOB, windows_done=1, windows_total=3, records=3),
    )
    assert (status.records, status.quarantined) == (3, 3)
    assert not status.job(REBUILD_JOB).done
    empty = warehouse.records.status("someone-else")
    assert (empty.state, empty.jobs, empty.records, empty.quarantined) == (None, (), 0, 0)


def test_status_counts_rows_up_to_its_cap_and_says_more_beyond(warehouse):
    plan = windows(1)
    rebuild(warehouse, plan)
    window_page(warehouse, plan[0], records=[make_record(f"r{n}") for n in range(3)])
    exact = warehouse.records.status(MERCHANT, count_cap=3)
    assert (exact.records, exact.records_exact) == (3, True)
    capped = warehouse.records.status(MERCHANT, count_cap=2)
    assert (capped.records, capped.records_exact) == (2, False)


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_two_merchants_first_rebuilds_never_wait_for_each_other(warehouse: Warehouse):
    """Each merchant's first rebuild while the other's is still open, on the connections the
    state store writes through: MariaDB's REPEATABLE READ locked the gap where the new row
    goes (the locking read of a merchant with no state yet), up to the next merchant's key, and
    two merchants starting together waited for each other or deadlocked."""
    writer = side_by_side_writer(warehouse.engine)
    anchor = {
        "change_cursor": "c-1",
        "anchor_at": T0 + DAY,
        "history_from": T0 - 2 * DAY,
        "snapshot_to": T0,
        "windows": windows(2, T0 - 2 * DAY),
        "now": T0,
    }
    with writer.connect() as first, writer.connect() as second:
        for conn in (first, second):
            bound_lock_waits(conn, seconds=1)
        with first.begin():
            sync_state.start_rebuild(first, "m-state-a", **anchor)
            with second.begin():
                sync_state.start_rebuild(second, "m-state-b", **anchor)
    for merchant in ("m-state-a", "m-state-b"):
        assert warehouse.state.load_state(merchant).change_cursor == "c-1"

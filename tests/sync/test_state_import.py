"""A state import held against the warehouse it goes into (``sync.state_import``): never past
what this warehouse has committed, every job's range tiled, nothing done that was not read
here; refused with its reason, or planned so that a re-read replaces any skip."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from recordsync.core.state import (
    REBUILD_JOB,
    Phase,
    StoredState,
    SyncState,
    Window,
    WindowProgress,
    backfill_job,
    resync_job,
)
from recordsync.sync.state_import import ImportRefusedError, plan_import

MERCHANT = "m-import"
HERE = "warehouse-here"
ANCHOR = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
HISTORY_FROM = datetime(2026, 11, 26, tzinfo=UTC)
SNAPSHOT_TO = ANCHOR + timedelta(seconds=60, milliseconds=1)
DAY = timedelta(days=1)
STATE = SyncState(
    merchant_id=MERCHANT,
    phase=Phase.TAILING,
    change_cursor="chg-0100",
    anchor_at=ANCHOR,
    history_from=HISTORY_FROM,
    snapshot_to=SNAPSHOT_TO,
    rebuilds=0,
    last_sequence="100",
    last_projection_as_of=ANCHOR + timedelta(hours=1),
    last_commit_at=None,
)
BACKFILL = backfill_job(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 3, tzinfo=UTC))
RESYNC = resync_job(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 3, tzinfo=UTC), "9f3a")


def window(job: str, start: datetime, end: datetime, *, done: bool = True, cursor=None):
    return WindowProgress(MERCHANT, job, Window(start, end), cursor, None, done, 10 if done else 0)


REBUILD = [
    window(REBUILD_JOB, HISTORY_FROM, HISTORY_FROM + DAY),
    window(REBUILD_JOB, HISTORY_FROM + DAY, HISTORY_FROM + 2 * DAY),
    window(REBUILD_JOB, HISTORY_FROM + 2 * DAY, SNAPSHOT_TO),
]
BACKFILL_WINDOWS = [
    window(BACKFILL, datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 2, tzinfo=UTC)),
    window(BACKFILL, datetime(2026, 10, 2, tzinfo=UTC), datetime(2026, 10, 3, tzinfo=UTC)),
]
STORED = StoredState(state=STATE, windows=[*REBUILD, *BACKFILL_WINDOWS], warehouse_id=HERE)


def plan(incoming: StoredState, here: StoredState = STORED, **options):
    options.setdefault("configured_history_from", HISTORY_FROM)
    return plan_import(incoming, here, **options)


def refused(incoming: StoredState, here: StoredState = STORED, **options) -> str:
    with pytest.raises(ImportRefusedError) as raised:
        plan(incoming, here, **options)
    return str(raised.value)


def test_this_warehouse_s_own_export_is_imported_as_it_is():
    done = plan(STORED)
    assert (done.state, done.windows, done.reread) == (STATE, STORED.windows, [])


def test_an_export_behind_this_warehouse_is_imported_and_its_tail_reads_again():
    older = replace(STATE, last_sequence="40", change_cursor="chg-0040")
    done = plan(replace(STORED, state=older))
    assert done.state == older
    assert done.reread == []


@pytest.mark.parametrize(
    ("warehouse_id", "reason"),
    [
        ("warehouse-elsewhere", "exported from warehouse warehouse-elsewhere, this is "),
        (None, "the file names no warehouse (an export of an earlier version)"),
    ],
    ids=["another-warehouse", "no-warehouse"],
)
def test_a_file_of_another_warehouse_is_refused_unless_accepted(warehouse_id, reason):
    foreign = replace(STORED, warehouse_id=warehouse_id)
    said = refused(foreign)
    assert reason in said
    assert "--accept-foreign" in said
    fresh = StoredState(state=None, windows=[], warehouse_id=HERE)
    accepted = plan(
        replace(foreign, state=replace(STATE, last_sequence=None)),
        fresh,
        accept_foreign=True,
    )
    # Nothing of it was read here: every window is read again, the snapshot not complete.
    assert accepted.state is not None
    assert accepted.state.phase is Phase.SNAPSHOT
    assert not any(w.done for w in accepted.windows)
    assert accepted.reread == ["5 windows marked done that this warehouse has not read: read again"]


def test_a_file_ahead_of_a_restored_warehouse_is_refused_unless_accepted():
    restored = replace(STORED, state=replace(STATE, last_sequence="60", change_cursor="chg-0060"))
    said = refused(STORED, restored)
    assert "at sequence 100, ahead of this warehouse's 60" in said
    assert "--accept-ahead" in said
    assert plan(STORED, restored, accept_ahead=True).state == STATE


def test_both_refusals_are_named_at_once():
    fresh = StoredState(state=None, windows=[], warehouse_id="another")
    said = refused(STORED, fresh)
    assert "--accept-foreign" in said
    assert "--accept-ahead" in said
    assert "this warehouse has no state of the merchant" in said


def test_a_file_whose_sequence_cannot_be_compared_is_held_to_its_platform_time():
    here = replace(STORED, state=replace(STATE, last_sequence=None, change_cursor="chg-anchor"))
    later = replace(STATE, last_projection_as_of=ANCHOR + timedelta(hours=2))
    assert "(platform time), ahead of this warehouse's" in refused(
        replace(STORED, state=later), here
    )
    earlier = replace(STATE, last_projection_as_of=ANCHOR + timedelta(minutes=1))
    assert plan(replace(STORED, state=earlier), here).state == earlier


def test_a_never_synced_warehouse_takes_a_file_that_read_no_change_and_reads_it_all():
    fresh = StoredState(state=None, windows=[], warehouse_id=HERE)
    anchored = replace(STATE, last_sequence=None, last_projection_as_of=None)
    done = plan(replace(STORED, state=anchored), fresh)
    assert done.state is not None
    assert done.state.phase is Phase.SNAPSHOT
    assert [w.done for w in done.windows] == [False] * 5


@pytest.mark.parametrize(
    "kept",
    [[0, 2], [0], []],
    ids=["a-window-removed", "the-unfinished-removed", "no-window-at-all"],
)
def test_holes_in_the_rebuild_are_planned_again_unread(kept):
    windows = [REBUILD[n] for n in kept]
    done = plan(replace(STORED, windows=windows))
    rebuild = [w for w in done.windows if w.job == REBUILD_JOB]
    spans = sorted((w.window.start, w.window.end) for w in rebuild)
    assert spans[0][0] == HISTORY_FROM
    assert spans[-1][1] == SNAPSHOT_TO
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # no gap
    assert sum(not w.done for w in rebuild) == 3 - len(kept)
    assert done.state is not None
    assert done.state.phase is Phase.SNAPSHOT
    assert any("had no window: planned again" in line for line in done.reread)


@pytest.mark.parametrize("job", [BACKFILL, RESYNC], ids=["backfill", "resync"])
def test_a_job_marked_done_that_this_warehouse_never_read_is_read_again(job):
    """Left done, a later ``backfill`` (or the resync's follower) of that range would end
    "done" having read nothing."""
    theirs = [replace(w, job=job) for w in BACKFILL_WINDOWS]
    here = replace(STORED, windows=REBUILD)  # no such job here
    done = plan(replace(STORED, windows=[*REBUILD, *theirs]), here)
    read_again = [w for w in done.windows if w.job == job]
    assert [(w.done, w.records) for w in read_again] == [(False, 0), (False, 0)]
    assert done.state == STATE  # the rebuild was done here: still tailing


def test_a_window_done_there_but_only_partly_done_here_is_read_again():
    half = window(REBUILD_JOB, HISTORY_FROM, HISTORY_FROM + timedelta(hours=12))
    rest = window(REBUILD_JOB, HISTORY_FROM + timedelta(hours=12), HISTORY_FROM + DAY, done=False)
    here = replace(STORED, windows=[half, rest, *REBUILD[1:], *BACKFILL_WINDOWS])
    done = plan(STORED, here)
    assert [w.done for w in done.windows if w.job == REBUILD_JOB] == [False, True, True]


def test_a_cursor_this_warehouse_never_reached_is_dropped():
    reading = window(REBUILD_JOB, HISTORY_FROM + 2 * DAY, SNAPSHOT_TO, done=False, cursor="r-9")
    there = replace(STORED, state=replace(STATE, phase=Phase.SNAPSHOT))
    there = replace(there, windows=[*REBUILD[:2], reading])
    here_window = replace(reading, cursor="r-3")
    here = replace(there, windows=[*REBUILD[:2], here_window])
    done = plan(there, here)
    assert done.windows[2].cursor is None
    assert done.reread == [
        "1 windows whose cursor this warehouse never reached: read from their start"
    ]
    same = plan(there, there)
    assert same.windows[2].cursor == "r-9"


def test_a_history_later_than_the_configured_one_is_refused():
    later = replace(STATE, history_from=HISTORY_FROM + DAY)
    windows = REBUILD[1:]
    said = refused(replace(STORED, state=later, windows=windows))
    assert "is later than 2026-11-26T00:00:00+00:00" in said
    assert "would never be read" in said
    # With none configured, this warehouse's own history_from is the bound.
    said = refused(replace(STORED, state=later, windows=windows), configured_history_from=None)
    assert "would never be read" in said


def test_a_window_outside_its_job_s_range_is_refused():
    stray = window(BACKFILL, datetime(2026, 10, 3, tzinfo=UTC), datetime(2026, 10, 4, tzinfo=UTC))
    said = refused(replace(STORED, windows=[*STORED.windows, stray]))
    assert "lies outside its range" in said

"""Fenced writes: a superseded holder's commit is refused, with nothing of it stored.

Each merchant's lease epoch rises with every new holder (``FleetSession.try_hold``); a write
carrying an older epoch must be rolled back whole (rows, history, quarantine, cursor), on
every backend, while the current holder's writes pass.  The epoch is checked first, under a
shared row lock, so a new holder's raise waits for a commit already past its check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import event
from support import pages
from support.warehouse_reads import fetch_revisions
from support.warehouse_samples import (
    MERCHANT,
    T0,
    WINDOW,
    make_change,
    make_record,
    start_rebuild_of_window,
    windows,
)

from recordsync.core.errors import LeaseSupersededError
from recordsync.core.models import RejectedItem
from recordsync.core.state import REBUILD_JOB, TailPage, Window, WindowPage
from recordsync.warehouse import MerchantStore, Warehouse

BACKFILL_JOB = "backfill:2024-02-01/2024-02-03"
BAD_ITEM = RejectedItem(position=0, raw=b'{"record_id": 1}', reason="bad", record_id=None)


def commit_window_page(store: MerchantStore) -> None:
    store.commit_window_pages(
        [
            WindowPage(
                REBUILD_JOB,
                WINDOW,
                records=[make_record("rec-w", revision=3)],
                rejected=[BAD_ITEM],
                next_cursor="window-cursor-2",
                cursor_issued_at=T0,
                done=False,
                position="window-cursor-1",
            )
        ]
    )


def commit_window_pages(store: MerchantStore) -> None:
    """A group commit of two pages of the window (the sync's group commits)."""
    store.commit_window_pages(
        [
            WindowPage(
                REBUILD_JOB,
                WINDOW,
                records=[make_record(f"rec-w{number}", revision=3)],
                rejected=[BAD_ITEM],
                next_cursor=f"window-cursor-{number + 1}",
                cursor_issued_at=T0,
                done=False,
                position=f"window-cursor-{number}",
            )
            for number in (1, 2)
        ],
    )


def commit_tail_page(store: MerchantStore) -> None:
    record = make_record("rec-t", revision=4)
    store.commit_tail_page(
        TailPage(
            records=[record],
            rejected=[BAD_ITEM],
            next_cursor="change-cursor-2",
            last_sequence="42",
            projection_as_of=T0,
            position="change-cursor-1",
            changes=[make_change(record, 42)],
        )
    )


def restart_window(store: MerchantStore) -> None:
    store.restart_window(REBUILD_JOB, WINDOW)


def split_window(store: MerchantStore) -> None:
    middle = WINDOW.start + (WINDOW.end - WINDOW.start) / 2
    store.split_window(REBUILD_JOB, WINDOW, [Window(middle, WINDOW.end)])


# The unread window after ``WINDOW`` in the rebuild of ``superseded``.
FOLLOWING = Window(WINDOW.end, WINDOW.end + timedelta(hours=1))


def carry_window(store: MerchantStore) -> None:
    middle = WINDOW.start + (WINDOW.end - WINDOW.start) / 2
    store.carry_window(REBUILD_JOB, WINDOW, FOLLOWING, Window(middle, FOLLOWING.end))


def ensure_job(store: MerchantStore) -> None:
    store.ensure_job(BACKFILL_JOB, windows(2, T0 - 30 * timedelta(days=1)))


def start_rebuild(store: MerchantStore) -> None:
    store.start_rebuild(
        change_cursor="change-cursor-new",
        anchor_at=T0 + timedelta(hours=1),
        history_from=WINDOW.start,
        snapshot_to=WINDOW.end,
        windows=windows(3),
    )


WRITES: list[Callable[[MerchantStore], None]] = [
    commit_window_page,
    commit_window_pages,
    commit_tail_page,
    restart_window,
    split_window,
    carry_window,
    ensure_job,
    start_rebuild,
]
WRITE_IDS = [write.__name__ for write in WRITES]


def everything_stored(store: Warehouse) -> dict[str, object]:
    """What the merchant has in every table a write may touch."""
    return {
        "state": store.state.load_state(MERCHANT),
        "rebuild windows": store.state.load_windows(MERCHANT, REBUILD_JOB),
        "backfill windows": store.state.load_windows(MERCHANT, BACKFILL_JOB),
        "records": store.records.fetch_records(MERCHANT),
        "revisions": fetch_revisions(store, MERCHANT),
        "quarantine": store.records.quarantined(MERCHANT),
    }


@dataclass(frozen=True)
class Superseded:
    """The warehouse, the epoch a replica held the merchant at, and the one another holds
    it at now."""

    store: Warehouse
    old: int
    new: int


@pytest.fixture
def superseded(warehouse: Warehouse):
    """A rebuild under way whose window has a cursor; the merchant was held at an epoch, and
    is held now, at a higher one, by another replica; an unread window follows."""
    start_rebuild_of_window(warehouse, (WINDOW, FOLLOWING))
    first = warehouse.fleet_session("replica-a")
    second = warehouse.fleet_session("replica-b")
    try:
        old = first.try_hold(MERCHANT)
        assert old is not None
        pages.commit_window_page(
            warehouse,
            MERCHANT,
            REBUILD_JOB,
            WINDOW,
            records=[make_record("rec-0")],
            rejected=[],
            next_cursor="window-cursor-1",
            cursor_issued_at=T0,
            done=False,
            position="start",
            epoch=old,
        )
        first.close()  # paused past its lock, say
        new = second.try_hold(MERCHANT)
        assert new is not None
        assert new > old
        yield Superseded(warehouse, old, new)
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("write", WRITES, ids=WRITE_IDS)
def test_a_superseded_epochs_write_is_refused_and_stores_nothing(superseded, write):
    before = everything_stored(superseded.store)
    with pytest.raises(LeaseSupersededError) as refused:
        write(superseded.store.fenced(MERCHANT, superseded.old))
    assert (refused.value.merchant_id, refused.value.expected, refused.value.found) == (
        MERCHANT,
        superseded.old,
        superseded.new,
    )
    assert everything_stored(superseded.store) == before


@pytest.mark.parametrize("write", WRITES, ids=WRITE_IDS)
def test_the_current_epochs_write_passes(superseded, write):
    before = everything_stored(superseded.store)
    write(superseded.store.fenced(MERCHANT, superseded.new))
    assert everything_stored(superseded.store) != before


def test_a_write_for_a_merchant_never_held_is_refused(warehouse):
    start_rebuild_of_window(warehouse)
    with pytest.raises(LeaseSupersededError) as refused:
        restart_window(warehouse.fenced(MERCHANT, 1))
    assert refused.value.found is None


def test_an_unfenced_write_passes_whatever_the_epoch(superseded):
    """The single-merchant daemon passes no epoch and keeps working as before."""
    superseded.store.state.restart_window(MERCHANT, REBUILD_JOB, WINDOW)
    assert superseded.store.state.load_windows(MERCHANT, REBUILD_JOB)[0].cursor is None


def test_a_merchant_store_reads_and_writes_its_own_merchant_only(superseded):
    """The store names its merchant once, so no call can name another (they named it on
    every call, checked each time, before)."""
    own = superseded.store.fenced(MERCHANT, superseded.new)
    other = superseded.store.for_merchant("merchant-2")
    assert own.load_state() is not None
    assert other.load_state() is None
    commit_tail_page(own)
    assert own.stored_revisions(["rec-t"]) == {"rec-t": 4}
    assert other.stored_revisions(["rec-t"]) == {}


SHARED_LOCK = {
    "postgresql": "FOR SHARE",
    "mysql": "LOCK IN SHARE MODE",
    "mariadb": "LOCK IN SHARE MODE",
}


def test_the_epoch_is_read_first_under_a_shared_row_lock(superseded):
    statements: list[str] = []

    def record(_conn, _cursor, statement, *_rest):
        statements.append(" ".join(statement.split()).upper())

    engine = superseded.store.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        commit_window_page(superseded.store.fenced(MERCHANT, superseded.new))
    finally:
        event.remove(engine, "before_cursor_execute", record)
    # The page's rows may go to the session's own stage first (nothing shared, no lock).
    first = next(
        s for s in statements if not s.startswith(("BEGIN", "SELECT 1")) and "STAGE" not in s
    )
    assert "FROM MERCHANT_LEASES" in first
    dialect = engine.dialect.name
    if dialect == "sqlite":  # BEGIN IMMEDIATE already holds the one write lock
        assert statements[0] == "BEGIN IMMEDIATE"
    else:
        assert first.endswith(SHARED_LOCK[dialect])


def test_a_new_holder_waits_for_a_commit_past_its_check_then_fences_the_next(
    warehouse_url, warehouse
):
    """The old holder's commit in flight finishes; the raise waits for it; the old holder's
    next commit is refused."""
    start_rebuild_of_window(warehouse)
    old = warehouse.fleet_session("replica-a")
    old_epoch = old.try_hold(MERCHANT)
    assert old_epoch is not None
    old.close()
    checked, go = threading.Event(), threading.Event()

    def pause_after_the_check(_conn, _cursor, statement, *_rest):
        if "merchant_leases" in statement:
            checked.set()
        elif checked.is_set() and not go.is_set():
            go.wait(10)

    taker = Warehouse.connect(warehouse_url)
    new = taker.fleet_session("replica-b")
    raised: list[int | None] = []
    in_flight = threading.Thread(
        target=commit_window_page, args=[warehouse.fenced(MERCHANT, old_epoch)]
    )
    event.listen(warehouse.engine, "before_cursor_execute", pause_after_the_check)
    try:
        in_flight.start()
        assert checked.wait(10)
        raising = threading.Thread(target=lambda: raised.append(new.try_hold(MERCHANT)))
        raising.start()
        raising.join(0.3)
        assert raising.is_alive(), "the epoch rose under a commit in flight"
        go.set()
        in_flight.join(10)
        raising.join(10)
    finally:
        go.set()
        if in_flight.ident is not None:
            in_flight.join(10)
        event.remove(warehouse.engine, "before_cursor_execute", pause_after_the_check)
        new.close()
        taker.close()
    (new_epoch,) = raised
    assert new_epoch is not None
    assert new_epoch > old_epoch
    assert warehouse.state.load_windows(MERCHANT, REBUILD_JOB)[0].cursor == "window-cursor-2"
    with pytest.raises(LeaseSupersededError):
        restart_window(warehouse.fenced(MERCHANT, old_epoch))

"""``recordsync verify``'s engine: read a range from the platform again, a UTC day at a time,
and compare it with the warehouse record by record (and repair, when asked).

Sync work on the ports, like the snapshot and the tail: the platform is a ``RecordSource``
read at the lowest budget priority (verify never delays the sync's reads), the warehouse a
``VerifyStore`` bound to the merchant, whose repairs are fenced by the store's epoch.  The
command runs it when it holds the merchant, the daemon holding the merchant runs it for a
request handed over; a fake store and a scripted platform drive it in the unit tests.  What
each pair of rows means is decided by ``comparison`` (pure).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime
from functools import partial
from typing import Final, Protocol

import structlog

from recordsync.core.errors import CursorExpiredError
from recordsync.core.models import RecordsPage
from recordsync.core.state import Window
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.comparison import (
    FAULTS,
    DayTally,
    Difference,
    VerifyResult,
    classify,
    compare_page,
    warehouse_only,
)
from recordsync.sync.demand import SnapshotDemand
from recordsync.sync.events import SyncObserver
from recordsync.sync.plan import plan_windows
from recordsync.sync.ports import RecordSource, VerifyStore
from recordsync.sync.resilience import StepRunner
from recordsync.sync.windows import split_range

log = structlog.get_logger("recordsync")

JOB: Final = "verify"  # the progress display's key
# The most stored rows one comparison holds the ids of: a day with more is compared in equal
# pieces of it, so verify's memory is bounded by this, not by the rows a day holds.
PIECE_ROWS: Final = 100_000


class VerifyProgress(Protocol):
    """What a display learns of a verify: the windows planned, then each page compared."""

    def planned(self, key: str, label: str, total: int, done: int) -> None: ...

    def page(self, key: str, records: int, *, done: bool) -> None: ...


def verify_range(
    source: RecordSource,
    store: VerifyStore,
    start: datetime,
    end: datetime,
    *,
    page_size: int,
    repair: bool,
    stopper: Stopper,
    progress: VerifyProgress | None = None,
    give_up_unreachable: float | None = None,
    demand: SnapshotDemand | None = None,
    piece_rows: int = PIECE_ROWS,
) -> VerifyResult:
    """Read ``[start, end)`` from the platform a UTC day at a time and compare (and repair).

    A window whose cursor expires (it took longer than a cursor lives) is read again whole.
    ``give_up_unreachable``: seconds an unreachable platform is tried before the run ends.
    ``demand``: the merchant's; a repair registers with it while it reads, so the tail gives
    it the budget as to a resync (it writes what it finds, like one).  A plain verify is a
    check that never delays the sync, and leaves the tail's pace alone.
    """
    with demand.reading(stopper) if demand is not None and repair else nullcontext():
        return _verify_range(
            source,
            store,
            start,
            end,
            page_size=page_size,
            repair=repair,
            stopper=stopper,
            progress=progress,
            give_up_unreachable=give_up_unreachable,
            piece_rows=piece_rows,
        )


def _verify_range(
    source: RecordSource,
    store: VerifyStore,
    start: datetime,
    end: datetime,
    *,
    page_size: int,
    repair: bool,
    stopper: Stopper,
    progress: VerifyProgress | None,
    give_up_unreachable: float | None,
    piece_rows: int,
) -> VerifyResult:
    runner = StepRunner(
        stopper=stopper,
        observer=SyncObserver(),
        fatal_is_final=True,
        give_up_after=give_up_unreachable,
    )
    windows = plan_windows(start, end)
    if progress is not None:
        progress.planned(JOB, "verify", len(windows), 0)
    days: list[DayTally] = []
    for window in windows:
        tally = DayTally(window.start.date())
        for piece in _pieces(store, window, runner, piece_rows):
            while True:
                try:
                    found = _verify_window(
                        source,
                        store,
                        piece,
                        runner,
                        page_size=page_size,
                        repair=repair,
                        on_page=_on_page(progress),
                    )
                    break
                except CursorExpiredError:
                    log.warning("verify_window_restarted", window_start=piece.start.isoformat())
            tally.add(found)
        days.append(tally)
        if progress is not None:
            progress.page(JOB, 0, done=True)
    return VerifyResult(days, repair=repair)


def _pieces(
    store: VerifyStore, window: Window, runner: StepRunner, piece_rows: int
) -> list[Window]:
    """The window, or equal pieces of it holding about ``piece_rows`` stored rows each (the
    database counts them from an index, no id loaded)."""
    stored = runner.run(
        lambda: store.count_created(window.start, window.end), what="verify: count rows"
    )
    return split_range(window.start, window.end, -(-stored // piece_rows))


def _verify_window(
    source: RecordSource,
    store: VerifyStore,
    window: Window,
    runner: StepRunner,
    *,
    page_size: int,
    repair: bool,
    on_page: Callable[[int], None],
) -> DayTally:
    tally = DayTally(window.start.date())
    # The warehouse's rows are listed BEFORE the platform's snapshot is taken: a row the tail
    # stores later is then never mistaken for one the platform does not know.
    stored_ids = runner.run(
        lambda: store.record_ids_created(window.start, window.end),
        what="verify: read record ids",
    )
    tally.warehouse_rows = len(stored_ids)
    listed: set[str] = set()
    cursor: str | None = None
    while True:
        page = runner.run(_page_reader(source, window, cursor, page_size), what="verify: read")
        fresh = [record for record in page.records if record.record_id not in listed]
        ids = [record.record_id for record in fresh]
        stored = runner.run(partial(store.stored_records, ids), what="verify: read rows")
        findings = compare_page(fresh, stored)
        listed.update(ids)
        on_page(len(ids))
        for kind, record_id in findings.differences:
            tally.note(kind, record_id)
        if repair and (findings.newer or findings.same_revision):
            runner.run(
                partial(
                    store.repair_records,
                    newer=findings.newer,
                    same_revision=findings.same_revision,
                ),
                what="verify: repair",
            )
            fixed = [*findings.newer, *findings.same_revision]
            after = runner.run(
                partial(store.stored_records, [record.record_id for record in fixed]),
                what="verify: read repaired rows",
            )
            tally.repaired += sum(
                1 for record in fixed if classify(record, after.get(record.record_id)) not in FAULTS
            )
        if not page.has_more or page.next_cursor is None:
            break
        cursor = page.next_cursor
    tally.platform_rows = len(listed)
    for record_id in warehouse_only(listed, stored_ids):
        tally.note(Difference.WAREHOUSE_ONLY, record_id)
    return tally


def _on_page(progress: VerifyProgress | None) -> Callable[[int], None]:
    """What the display learns of each page: the records compared."""
    if progress is None:
        return lambda _records: None
    return lambda records: progress.page(JOB, records, done=False)


def _page_reader(
    source: RecordSource, window: Window, cursor: str | None, page_size: int
) -> Callable[[], RecordsPage]:
    """One page of the window at the lowest priority: verify never delays the sync's reads."""
    if cursor is None:
        return lambda: source.records_first(
            window.start, window.end, limit=page_size, priority=Priority.BACKGROUND
        )
    return lambda: source.records_next(cursor, limit=page_size, priority=Priority.BACKGROUND)

"""The drift check job: the last closed day read again from the platform at the lowest
budget priority and compared with the warehouse (what counts as drift is in ``drift``).

It runs as a periodic job of the daemon, every ``drift_interval`` seconds, and compares
nothing until the snapshot is done.
"""

from __future__ import annotations

from datetime import datetime

from recordsync.core.state import Phase
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.drift import DriftTally, last_closed_day


def check_drift(ctx: SyncContext, stopper: Stopper) -> None:
    """Re-read the last closed day at the lowest priority; count rows behind the platform.

    Every read, of the platform and of the warehouse alike, is a step of the runner: an
    outage of either while the check runs is waited out like one during a page commit, never
    an exception that ends the daemon.
    """
    merchant_id = ctx.options.merchant_id
    runner = ctx.runner(stopper, fatal_is_final=False)
    state = runner.run(lambda: ctx.warehouse.load_state(merchant_id), what="drift check")
    if state is None or state.phase is not Phase.TAILING:
        return  # the snapshot is still filling the warehouse: nothing to compare yet
    platform_now = state.last_projection_as_of or state.anchor_at
    window = last_closed_day(platform_now)
    tally = DriftTally()
    cursor: str | None = None
    while True:
        page = runner.run(
            lambda at=cursor: ctx.records_page(  # type: ignore[misc]
                window.start, window.end, at, Priority.BACKGROUND
            ),
            what="drift check",
        )
        ids = [record.record_id for record in page.records]

        def compare(ids: list[str] = ids) -> tuple[dict[str, int], datetime | None]:
            stored = ctx.warehouse.stored_revisions(merchant_id, ids)
            current = ctx.warehouse.load_state(merchant_id)
            return stored, current.last_projection_as_of if current else None

        stored, covered_until = runner.run(compare, what="drift check")
        tally.add(page.records, stored, covered_until=covered_until)
        if not page.has_more:
            break
        cursor = page.next_cursor
    ctx.observer.drift_checked(window, tally.rows_behind)
    fields = {
        "window_start": window.start.isoformat(),
        "checked": tally.checked,
        "behind": tally.behind,
        "missing": tally.missing,
        "still_arriving": tally.ignored_recent,
    }
    if tally.rows_behind:
        ctx.log.error("drift_found", action="alert: investigate; nothing was changed", **fields)
    else:
        ctx.log.info("drift_checked", **fields)

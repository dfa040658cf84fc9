"""The BI indexes after a bulk load: when the sync asks the warehouse to build them.

The warehouse leaves them out when a new snapshot job starts while ``records`` is empty
(``Warehouse.ensure_job`` and ``start_rebuild``: a first load writes about half as much per
record without them).  They are derived data, so only one thing matters: that they are built
in the end.  The sync asks for them when a job is done (a backfill after its last window, the
daemon's rebuild once its last window commits) and whenever a daemon takes up a merchant
whose rebuild is done, which covers a backfill abandoned half-way and a process killed
between a job's last window and the build.  The warehouse builds only what is missing, so
asking when nothing is costs one look at the catalogue.
"""

from __future__ import annotations

from recordsync.core.stopping import Stopper
from recordsync.sync.context import SyncContext


def build_bi_indexes(ctx: SyncContext, stopper: Stopper) -> None:
    """Have the missing BI indexes built, waiting out a warehouse outage like any step."""

    def step() -> None:
        # With one writer (SQLite) the build holds the database's write lock throughout:
        # the tail's commits wait for it here rather than in SQLite's busy handler.
        with ctx.writer:
            ctx.warehouse.build_bi_indexes(ctx.options.merchant_id)

    ctx.runner(stopper, fatal_is_final=False).run(step, what="build BI indexes")


def bi_indexes_missing(ctx: SyncContext, stopper: Stopper) -> bool:
    """Whether any BI index is still to build (one look at the catalogue)."""
    runner = ctx.runner(stopper, fatal_is_final=False)
    missing = runner.run(
        lambda: ctx.warehouse.missing_bi_indexes(ctx.options.merchant_id),
        what="look for missing BI indexes",
    )
    return bool(missing)

"""The BI indexes of a bulk load: whether to leave them out, and when to have them built.

The warehouse leaves them out when a new snapshot job starts while ``records`` is empty and the
sync asks it to (``StateStore.ensure_job`` and ``start_rebuild``): a first load writes about half
as much per record without them, but the build at its end costs time of its own (6 to 9 us per
record on SQLite, 5 on PostgreSQL, 6 on MariaDB here).  That trade pays only when the writer is
what bounds the load.  When the platform's rate limit bounds it, the writer idles most of the
time with the indexes on, so leaving them out saves nothing and the build only adds its seconds
to the job's end (``bench/budget_utilisation.py``: 1.8 s of a 104 s backfill at the default
limit).  ``defer_for`` decides from the budget's terms, before the first page.

They are derived data, so only one thing matters: that they are built in the end.  The sync
asks for them when a job is done (a backfill after its last window, the daemon's rebuild once
its last window commits) and whenever a daemon takes up a merchant whose rebuild is done,
which covers a backfill abandoned half-way and a process killed between a job's last window
and the build.  The warehouse builds only what is missing, so asking when nothing is costs
one look at the catalogue.
"""

from __future__ import annotations

from typing import Final

from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Pace
from recordsync.sync.context import SyncContext
from recordsync.sync.resilience import StepRunner

# Records per second above which a first load may outrun a writer keeping the BI indexes up to
# date.  The slowest indexed load measured here is MariaDB's at its default buffer pool: 9 400
# records/s before revision 0008 gave it a sequential key, 18 800 after (``bench/ingest.py``).  At
# half of the slowest the writer keeps up with room to spare; the platform's default limit (2
# requests of 1000 records a second) is well below it.
WRITE_BOUND_RECORDS_PER_S: Final = 5_000.0


def defer_for(pace: Pace, page_size: int) -> bool:
    """Whether a first load should leave the BI indexes out: only when the budget lets pages
    arrive faster than an indexed writer is sure to keep up with."""
    ceiling = pace.requests / pace.seconds * page_size
    return ceiling > WRITE_BOUND_RECORDS_PER_S


def defer_bi_indexes(ctx: SyncContext) -> bool:
    """``defer_for`` the budget's terms (capabilities.limits) and this sync's page size."""
    return defer_for(ctx.client.pace(), ctx.options.page_size)


def build_bi_indexes(ctx: SyncContext, runner: StepRunner) -> None:
    """Have the missing BI indexes built, waiting out a warehouse outage like any step
    (``runner``: the job's own, which counts its failures across deferred runs)."""

    def step() -> None:
        # With one writer (SQLite) the build holds the database's write lock throughout:
        # the tail's commits wait for it here rather than in SQLite's busy handler.
        with ctx.writer:
            ctx.warehouse.build_bi_indexes()

    runner.run(step, what="build BI indexes")


def bi_indexes_missing(ctx: SyncContext, stopper: Stopper) -> bool:
    """Whether any BI index is still to build (one look at the catalogue)."""
    runner = ctx.runner(stopper, fatal_is_final=False)
    missing = runner.run(
        ctx.warehouse.missing_bi_indexes,
        what="look for missing BI indexes",
    )
    return bool(missing)

"""CPython's garbage collector set for a process that syncs pages; the commands that sync
(``run``, ``backfill``, ``demo``) call ``tune_collector`` once, before their first page.

Why: a page of 1000 records allocates some 5000 container objects (records, staged rows,
lists) that its commit frees again by reference counting, but CPython's youngest generation
is collected after every 700 net allocations, so two or three collections ran per page, each
walking every page then in flight, and every tenth of them the middle generation too: 2.6 us
of our CPU a record into PostgreSQL, 7 % of it (bench/README.md, "the collector").  At 10 000
they run about once in 50 pages (0.3 us a record).  Cycles still get collected: garbage that
refcounting leaves is allocated and never freed, so it counts towards the next collection.

The objects alive at start-up (modules, SQLAlchemy's metadata, the settings) live as long as
the process: frozen, the oldest generation's collections skip them.  ``gc.collect()`` first,
so no garbage is frozen with them.
"""

from __future__ import annotations

import gc
from typing import Final

# Net container allocations between two collections of the youngest generation (CPython 700).
YOUNG_THRESHOLD: Final = 10_000


def tune_collector() -> None:
    gc.collect()
    gc.freeze()
    _young, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)

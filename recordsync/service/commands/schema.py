"""``recordsync migrate``: bring the warehouse's schema to this version's newest revision, and
build the BI indexes a first load left out (a backfill abandoned half-way leaves them out
until a daemon takes the merchant up, or until this command).

Schema changes wait for their locks a few seconds at most (``warehouse.timeouts.DDL``), so
that a statement queued behind a long transaction never holds every page commit behind it;
a wait that runs out, or a warehouse restarting, is tried again with a growing pause, a few
times, and then said in one line (exit 1): every wait of this command is bounded too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import structlog

from recordsync.core.database_url import shown
from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.settings import Settings
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")

# Pauses before the tries after the first: about a minute in all.
RETRY_PAUSES: Final = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)


def migrate(settings: Settings, *, sleep: Callable[[float], None] = time.sleep) -> int:
    warehouse = Warehouse.connect(settings.database_url)
    try:
        _with_retries(warehouse.migrate, "migrate", sleep)
        _with_retries(warehouse.bi.build_bi_indexes, "build BI indexes", sleep)
    finally:
        warehouse.close()
    log.info("migrated", database=shown(settings.database_url))
    return 0


def _with_retries(step: Callable[[], object], what: str, sleep: Callable[[float], None]) -> None:
    for pause in (*RETRY_PAUSES, None):
        try:
            step()
        except WarehouseUnavailableError as exc:
            if pause is None:
                raise
            log.warning("migrate_retry", step=what, error=str(exc), retry_in=pause)
            sleep(pause)
        else:
            return

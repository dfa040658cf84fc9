"""``recordsync migrate``: bring the warehouse's schema to this version's newest revision, and
build the BI indexes a first load left out (a backfill abandoned half-way leaves them out
until a daemon takes the merchant up, or until this command)."""

from __future__ import annotations

import structlog

from recordsync.core.database_url import shown
from recordsync.core.settings import Settings
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")


def migrate(settings: Settings) -> int:
    warehouse = Warehouse.connect(settings.database_url)
    try:
        warehouse.migrate()
        warehouse.build_bi_indexes()
    finally:
        warehouse.close()
    log.info("migrated", database=shown(settings.database_url))
    return 0

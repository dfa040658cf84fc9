"""``recordsync migrate``: bring the warehouse's schema to this version's newest revision."""

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
    finally:
        warehouse.close()
    log.info("migrated", database=shown(settings.database_url))
    return 0

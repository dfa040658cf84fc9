"""``recordsync migrate``: bring the warehouse's schema to this version's newest revision."""

from __future__ import annotations

import structlog

from recordsync.core.settings import Settings
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")


def migrate(settings: Settings) -> int:
    warehouse = Warehouse.connect(settings.database_url)
    try:
        warehouse.migrate()
    finally:
        warehouse.close()
    log.info("migrated", database=_safe_url(settings.database_url))
    return 0


def _safe_url(url: str) -> str:
    """A database URL without its password, for logs."""
    from sqlalchemy.engine import make_url  # noqa: PLC0415

    return make_url(url).render_as_string(hide_password=True)

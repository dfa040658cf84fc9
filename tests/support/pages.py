"""One snapshot page committed the way the sync commits it: built whole as a ``WindowPage``
and handed to the page store, its window's cursor moved in the same transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from recordsync.core.models import Record, RejectedItem
from recordsync.core.state import Window, WindowPage
from recordsync.warehouse import Warehouse, WriteResult


def commit_window_page(
    warehouse: Warehouse,
    merchant_id: str,
    job: str,
    window: Window,
    *,
    records: Sequence[Record],
    rejected: Sequence[RejectedItem],
    next_cursor: str | None,
    cursor_issued_at: datetime | None,
    done: bool,
    position: str,
    epoch: int | None = None,
) -> WriteResult:
    page = WindowPage(job, window, records, rejected, next_cursor, cursor_issued_at, done, position)
    return warehouse.pages.commit_window_pages(merchant_id, [page], epoch=epoch)[0]

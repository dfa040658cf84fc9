"""The process-wide log fields of a process that syncs one merchant.

Each merchant's sync events carry ``merchant_id`` and ``phase`` on their own (the sync binds
them), so a process of many merchants needs nothing more.  A process of one merchant (a
single-merchant daemon, a backfill) also puts them on every other event it logs (start-up,
HTTP, signals): an operator filtering by merchant never misses one.
"""

from __future__ import annotations

from recordsync.logs import process_context
from recordsync.sync.events import SyncObserver


class ProcessLogContext(SyncObserver):
    """Keeps the process's ``merchant_id`` and ``phase`` log fields in step with the sync."""

    def __init__(self, merchant_id: str) -> None:
        self.merchant_id = merchant_id
        process_context.update(merchant_id=merchant_id)

    def phase_changed(self, phase: str) -> None:
        process_context.update(merchant_id=self.merchant_id, phase=phase)

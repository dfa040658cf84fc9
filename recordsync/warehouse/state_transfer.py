"""A merchant's sync state read whole and written whole (``recordsync merchant state``).

``write`` replaces the merchant's ``sync_state`` row and every snapshot window in one
transaction that also raises the merchant's lease epoch, as a new holder would, and marks the
lease released again: any writer from before (a holder paused in the middle of a page, woken
after the import) is fenced off by the epoch, and the fleet sees the merchant as free.  The
caller makes sure nobody syncs the merchant (it is paused and held by nobody).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine

from recordsync.core.state import SyncState, WindowProgress
from recordsync.warehouse import sync_state
from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.database_clock import read_database_now
from recordsync.warehouse.lease import epochs


class StateTransfer:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})

    def read(self, merchant_id: str) -> tuple[SyncState | None, list[WindowProgress], int | None]:
        """The merchant's state (None: never synced), every job's windows and its lease
        epoch (None: never held), as one consistent read."""
        with translate_errors("read sync state"), self._engine.begin() as conn:
            return (
                sync_state.load_state(conn, merchant_id),
                sync_state.all_windows(conn, merchant_id),
                epochs.current_epoch(conn, merchant_id),
            )

    def write(
        self,
        merchant_id: str,
        state: SyncState | None,
        windows: Sequence[WindowProgress],
        *,
        writer: str,
    ) -> int:
        """Replace the merchant's state and windows under a new epoch (module docstring);
        the epoch."""
        with translate_errors("write sync state"), self._writer.begin() as conn:
            epoch = epochs.raise_epoch(conn, merchant_id, writer)
            sync_state.replace_all(conn, merchant_id, state, windows, read_database_now(conn))
            epochs.mark_released(conn, merchant_id, writer, epoch)
            return epoch

"""A merchant's sync state read whole and written whole (``recordsync merchant state``).

``replace`` reads the merchant's state, has the caller decide what to write from it, and
writes that, in one transaction that also raises the merchant's lease epoch, as a new holder
would, and marks the lease released again: any writer from before (a holder paused in the
middle of a page, woken after the import) is fenced off by the epoch, and the fleet sees the
merchant as free.  The pause is checked in the same transaction, after the ``sync_state`` row
is locked, so that a ``resume`` between the command's own checks and its write cannot let a
sync start from the state being replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Engine, select

from recordsync.core.errors import RecordSyncError
from recordsync.core.state import StoredState, SyncState, WindowProgress
from recordsync.warehouse import controls, identity, sync_state
from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.database_clock import read_database_now
from recordsync.warehouse.lease import epochs
from recordsync.warehouse.schema import sync_state as sync_state_table

# What the caller writes for the state the warehouse holds now: the state and its windows.
Decide = Callable[[StoredState], tuple[SyncState | None, Sequence[WindowProgress]]]


class MerchantNotPausedError(RecordSyncError):
    """The merchant was resumed before its state could be replaced."""


class StateTransfer:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})

    def read(self, merchant_id: str) -> tuple[StoredState, int | None]:
        """The merchant's state (its ``state`` None: never synced), every job's windows and
        this warehouse's id, and its lease epoch (None: never held), as one consistent read."""
        with translate_errors("read sync state"), self._engine.begin() as conn:
            stored = StoredState(
                state=sync_state.load_state(conn, merchant_id),
                windows=sync_state.all_windows(conn, merchant_id),
                warehouse_id=identity.warehouse_id(conn),
            )
            return stored, epochs.current_epoch(conn, merchant_id)

    def replace(self, merchant_id: str, decide: Decide, *, writer: str) -> int:
        """Replace the paused merchant's state and windows with what ``decide`` makes of the
        ones stored, under a new epoch (module docstring); the epoch.  What ``decide`` raises
        leaves everything as it was."""
        with translate_errors("write sync state"), self._writer.begin() as conn:
            conn.execute(
                select(sync_state_table.c.merchant_id)
                .where(sync_state_table.c.merchant_id == merchant_id)
                .with_for_update()
            )
            if merchant_id not in controls.paused(conn, [merchant_id]):
                raise MerchantNotPausedError(
                    f"merchant {merchant_id} was resumed meanwhile: nothing was imported"
                )
            here = StoredState(
                state=sync_state.load_state(conn, merchant_id),
                windows=sync_state.all_windows(conn, merchant_id),
                warehouse_id=identity.warehouse_id(conn),
            )
            state, windows = decide(here)
            epoch = epochs.raise_epoch(conn, merchant_id, writer)
            sync_state.replace_all(conn, merchant_id, state, windows, read_database_now(conn))
            epochs.mark_released(conn, merchant_id, writer, epoch)
            return epoch

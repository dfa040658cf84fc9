"""Fenced writes: how a superseded holder's write is refused with nothing of it stored.

Every write the sync makes takes an optional lease ``epoch`` (given by
``FleetSession.try_hold``; ``Warehouse.fenced`` binds it for the sync).  With one, the FIRST
statement of the write's transaction checks it against the merchant's
(``lease.epochs.check_epoch``), and a superseded holder's write raises
``LeaseSupersededError`` with nothing of it stored.  The page store takes the same check
handed in (``pages.store.Fence``), since its wing knows no lease.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine

from recordsync.warehouse.connection import translate_errors
from recordsync.warehouse.lease import epochs


@contextmanager
def fenced_write(
    writer: Engine, action: str, merchant_id: str, epoch: int | None
) -> Iterator[Connection]:
    """One write transaction on ``writer``; with an ``epoch``, fenced by its first statement."""
    with translate_errors(action), writer.begin() as conn:
        if epoch is not None:
            epochs.check_epoch(conn, merchant_id, epoch, action=action)
        yield conn

"""Lease epochs: which holder's writes still count for a merchant (fenced writes).

A lock alone cannot stop a holder that was paused (a long GC pause, SIGSTOP, a network
partition) from waking up and committing after another process took the merchant over: its
commit was prepared before it lost the lock.  So each merchant has an ``epoch`` in
``merchant_leases``:

- a new holder raises it by one right after taking the merchant's lock (``raise_epoch``), in a
  transaction of its own that locks the row;
- every fenced write (a page with its cursor, a window restart, a rebuild, a job's windows)
  reads the epoch with a SHARED row lock in its own transaction (``check_epoch``), before it
  writes anything shared, and is refused unless the epoch is the one its holder was given.

The shared lock orders the two: a raise waits for the commits already past their check (they
were the holder's at the time, and finish), and a commit that starts after the raise sees the
new epoch.  So once ``raise_epoch`` returns, no commit of an older epoch can succeed.

**Epochs are never reused**, not even after a failover to an asynchronous replica that lacks
the last raises: a raise gives ``max(epoch + 1, the database's clock in
milliseconds)``.  Within one history epochs rise by at least one; across a failover, the new
primary's next raise reads a clock later than every raise the old primary made (a failover
takes longer than the skew between two NTP-synced servers), so its epoch is above every epoch
ever issued, and a holder of a lost epoch can never meet its number again.  What a failover
cannot undo is its own loss: until the next raise, the row is the one the replica had, and a
holder of that epoch still passes; its lock went with the old primary, so its keeper stops it
within the lease.
PostgreSQL takes the lock as ``FOR SHARE``, MariaDB as ``LOCK IN SHARE MODE`` (a locking read
sees the newest committed row even under REPEATABLE READ); SQLite's ``BEGIN IMMEDIATE``
already lets one writer in at a time.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from sqlalchemy import Connection, insert, select, update

from recordsync.core.errors import LeaseSupersededError
from recordsync.warehouse.database_clock import database_now, read_database_now
from recordsync.warehouse.schema import merchant_leases

_log = structlog.get_logger(__name__)


def raise_epoch(conn: Connection, merchant_id: str, holder: str) -> int:
    """The merchant's new epoch, now ``holder``'s: above the previous one, and at least the
    database's clock in milliseconds (see the module docstring).

    Only the holder of the merchant's lock calls this, so no two raises race; the row lock
    (``FOR UPDATE``) makes the raise wait for fenced commits in flight (see above).  On
    MariaDB the caller runs it under READ COMMITTED (``session``), so that first rows of two
    merchants inserted side by side do not deadlock on a gap lock.
    """
    current = conn.execute(
        select(merchant_leases.c.epoch)
        .where(merchant_leases.c.merchant_id == merchant_id)
        .with_for_update()
    ).scalar_one_or_none()
    now = read_database_now(conn)
    epoch = max(0 if current is None else int(current) + 1, epoch_floor(now))
    values = {"holder": holder, "acquired_at": now, "released_at": None}
    if current is None:
        conn.execute(insert(merchant_leases).values(merchant_id=merchant_id, epoch=epoch, **values))
        return epoch
    conn.execute(
        update(merchant_leases)
        .where(merchant_leases.c.merchant_id == merchant_id)
        .values(epoch=epoch, **values)
    )
    return epoch


def epoch_floor(now: datetime) -> int:
    """The lowest epoch a raise at ``now`` (the database's clock) may give: milliseconds
    since 1970, UTC."""
    return int(now.timestamp() * 1000)


def check_epoch(conn: Connection, merchant_id: str, epoch: int, *, action: str) -> None:
    """Refuse the write in progress unless ``epoch`` is still the merchant's.

    Must come before every statement of the write's transaction that touches shared data (a
    page's rows may be sent to the session's own stage before it); the shared row lock it
    takes is held until that transaction ends.  Raises ``LeaseSupersededError`` (the caller's
    transaction then rolls back, nothing of the write stored).
    """
    found = conn.execute(
        select(merchant_leases.c.epoch)
        .where(merchant_leases.c.merchant_id == merchant_id)
        .with_for_update(read=True)
    ).scalar_one_or_none()
    if found != epoch:
        found_epoch = None if found is None else int(found)
        _log.warning(
            "fenced_write_refused",
            merchant_id=merchant_id,
            write=action,
            epoch=epoch,
            current_epoch=found_epoch,
            action="stop syncing the merchant: another holder writes it now",
        )
        raise LeaseSupersededError(merchant_id, expected=epoch, found=found_epoch)


def mark_released(conn: Connection, merchant_id: str, holder: str, epoch: int) -> None:
    """Stamp a graceful release; a row another holder has raised since is left alone."""
    conn.execute(
        update(merchant_leases)
        .where(
            merchant_leases.c.merchant_id == merchant_id,
            merchant_leases.c.holder == holder,
            merchant_leases.c.epoch == epoch,
        )
        .values(released_at=database_now())
    )


def unreleased(conn: Connection) -> dict[str, str]:
    """merchant -> holder of every lease not released gracefully (held, or its holder died)."""
    query = select(merchant_leases.c.merchant_id, merchant_leases.c.holder).where(
        merchant_leases.c.released_at.is_(None)
    )
    return {row.merchant_id: row.holder for row in conn.execute(query)}


def current_epoch(conn: Connection, merchant_id: str) -> int | None:
    """The merchant's epoch; None when it was never held."""
    found = conn.execute(
        select(merchant_leases.c.epoch).where(merchant_leases.c.merchant_id == merchant_id)
    ).scalar_one_or_none()
    return None if found is None else int(found)

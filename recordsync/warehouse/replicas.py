"""Who is alive: one ``replicas`` row per process sharing the merchants, by the database's clock.

Each replica upserts its own row on every heartbeat (``beat``) with ``heartbeat_at`` set to
the DATABASE's now (``database_clock``), and counts as live while that is younger than the
caller's ``stale_after`` by the same clock (``live``).  A replica that dies leaves its row
behind; it stops counting as soon as its heartbeat ages, and when another replica joins, rows
older than ``FORGET_AFTER`` are deleted, so that ids that never come back (a pod's) do not
pile up.  A replica
that leaves gracefully deletes its own row (``forget``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import Connection, delete, insert, select, update

from recordsync.warehouse.database_clock import database_now, read_database_now
from recordsync.warehouse.schema import replicas

FORGET_AFTER: Final = timedelta(days=1)


def beat(
    conn: Connection, replica_id: str, *, hostname: str, pid: int, merchants_held: int
) -> bool:
    """Stamp ``replica_id``'s heartbeat; True when its row was new (the replica joined).

    Only the replica itself writes its row, so the update-then-insert cannot race.
    """
    beaten = conn.execute(
        update(replicas)
        .where(replicas.c.replica_id == replica_id)
        .values(heartbeat_at=database_now(), merchants_held=merchants_held)
    )
    if beaten.rowcount == 1:
        return False
    now = read_database_now(conn)
    conn.execute(
        insert(replicas).values(
            replica_id=replica_id,
            hostname=hostname,
            pid=pid,
            started_at=now,
            heartbeat_at=now,
            merchants_held=merchants_held,
        )
    )
    _forget_long_dead(conn, now - FORGET_AFTER)
    return True


def live(conn: Connection, stale_after: float) -> list[str]:
    """Sorted ids of the replicas whose heartbeat is younger than ``stale_after`` seconds."""
    since = read_database_now(conn) - timedelta(seconds=stale_after)
    query = select(replicas.c.replica_id).where(replicas.c.heartbeat_at > since)
    # Sorted here, not by the database's collation, so every backend and replica agrees.
    return sorted(conn.execute(query).scalars())


def _forget_long_dead(conn: Connection, before: datetime) -> None:
    """Delete the rows whose heartbeat is older than ``before``, by key: a DELETE filtered on
    the heartbeat would scan, and lock, the rows of replicas joining at the same moment."""
    dead = list(
        conn.execute(
            select(replicas.c.replica_id).where(replicas.c.heartbeat_at < before)
        ).scalars()
    )
    if dead:
        conn.execute(
            delete(replicas).where(
                replicas.c.replica_id.in_(dead), replicas.c.heartbeat_at < before
            )
        )


def forget(conn: Connection, replica_id: str) -> None:
    """Delete ``replica_id``'s row: it left."""
    conn.execute(delete(replicas).where(replicas.c.replica_id == replica_id))

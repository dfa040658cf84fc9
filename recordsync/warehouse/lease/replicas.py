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

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Final

import orjson
from sqlalchemy import Connection, delete, insert, select, update

from recordsync import __version__
from recordsync.warehouse.database_clock import database_now, read_database_now
from recordsync.warehouse.schema import replicas
from recordsync.warehouse.values import ReplicaVersion, RequestKind

FORGET_AFTER: Final = timedelta(days=1)
# What this version's replicas say of themselves (revision 0014): a command asks before it hands
# a holder work it might not do (a kind it does not know, a pause it does not read).
THIS_VERSION: Final = __version__
REQUEST_KINDS: Final = ",".join(kind.value for kind in RequestKind)
# The kinds a holder of 0013's version takes (it skips resync and reset, which it lists).
_EARLIER_KINDS: Final = frozenset({RequestKind.BACKFILL.value, RequestKind.VERIFY.value})


def beat(
    conn: Connection,
    replica_id: str,
    *,
    hostname: str,
    pid: int,
    merchants_held: int,
    merchants: Collection[str] | None = None,
) -> bool:
    """Stamp ``replica_id``'s heartbeat; True when its row was new (the replica joined).

    ``merchants``: those the replica is configured with, written when it joins (None: not
    said).  Only the replica itself writes its row, so the update-then-insert cannot race.
    """
    beaten = conn.execute(
        update(replicas)
        .where(replicas.c.replica_id == replica_id)
        .values(
            heartbeat_at=database_now(),
            merchants_held=merchants_held,
            # Every beat, not only at the join: a replica id that outlives a process (a pod's
            # name) must not keep the row an earlier version wrote.
            version=THIS_VERSION,
            request_kinds=REQUEST_KINDS,
        )
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
            merchants=None if merchants is None else orjson.dumps(sorted(merchants)).decode(),
            version=THIS_VERSION,
            request_kinds=REQUEST_KINDS,
        )
    )
    _forget_long_dead(conn, now - FORGET_AFTER)
    return True


def live(conn: Connection, stale_after: float) -> dict[str, frozenset[str] | None]:
    """The replicas whose heartbeat is younger than ``stale_after`` seconds, sorted by id,
    each with the merchants it is configured with (None: an older replica that did not say)."""
    since = read_database_now(conn) - timedelta(seconds=stale_after)
    query = select(replicas.c.replica_id, replicas.c.merchants).where(
        replicas.c.heartbeat_at > since
    )
    found = {row.replica_id: _merchants(row.merchants) for row in conn.execute(query)}
    # Sorted here, not by the database's collation, so every backend and replica agrees.
    return {replica_id: found[replica_id] for replica_id in sorted(found)}


def version_of(conn: Connection, replica_id: str) -> ReplicaVersion | None:
    """What ``replica_id`` said of itself; None when it has no row (it left, or never beat)."""
    row = conn.execute(
        select(replicas.c.version, replicas.c.request_kinds).where(
            replicas.c.replica_id == replica_id
        )
    ).one_or_none()
    if row is None:
        return None
    if row.version is None:
        # Before revision 0014 a holder took the kinds that existed then.
        return ReplicaVersion(
            None, frozenset({RequestKind.BACKFILL.value, RequestKind.VERIFY.value})
        )
    kinds = frozenset(filter(None, (row.request_kinds or "").split(",")))
    return ReplicaVersion(row.version, kinds)


def _merchants(stored: str | None) -> frozenset[str] | None:
    if stored is None:
        return None
    try:
        value = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return None  # not ours to judge: taken as "not said"
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    return frozenset(value)


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

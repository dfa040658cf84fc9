"""Page transactions that lost a lock conflict, and trying them again at once.

Pages commit side by side on the servers (``PageStore.concurrent_writes``).  Each takes its
row locks in key order, which kept pages from deadlocking one another in every measurement
(bench/README.md, 7), but nothing orders them against other transactions (a BI tool's
locking read, an operator's UPDATE, another table's locks taken in another order), and InnoDB
still locks a gap where an upsert meets an existing key.  When a deadlock happens the server
rolls one transaction back whole (MariaDB error 1213; PostgreSQL SQLSTATE 40P01); a lock
wait that times out (1205) is the same story told later.

Nothing of such a transaction was stored, and a page transaction is safe to run again: its
upserts keep the highest revision whichever order they run in, and its cursor moves to the
same place.  So the loser is retried here, a few times after a short random pause, instead
of surfacing as "warehouse unavailable" and waiting out the sync's back-off.  What still
fails after that is raised as before (``WarehouseUnavailableError``: the sync waits and
tries the page again).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final, TypeVar

from sqlalchemy import exc

from recordsync.core.errors import WarehouseUnavailableError

T = TypeVar("T")

# MariaDB / MySQL: ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT (the driver's first argument).
_MYSQL_CONFLICTS: Final = frozenset({1213, 1205})
# PostgreSQL: deadlock_detected, serialization_failure.
_POSTGRES_CONFLICTS: Final = frozenset({"40P01", "40001"})
ATTEMPTS: Final = 6
# The n-th retry pauses up to n times this long: enough for the winner to commit its page.
PAUSE_STEP_S: Final = 0.02


def lost_lock_conflict(error: BaseException) -> bool:
    """Whether ``error`` was raised from a driver error that says the server rolled the
    transaction back for a deadlock or a lock wait timeout."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, exc.DBAPIError) and _driver_conflict(current.orig):
            return True
        current = current.__cause__
    return False


def _driver_conflict(cause: BaseException | None) -> bool:
    """By the server's code, never the message: psycopg's SQLSTATE, PyMySQL's error number."""
    sqlstate = getattr(cause, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate in _POSTGRES_CONFLICTS
    try:
        from pymysql.err import MySQLError  # noqa: PLC0415 - PyMySQL is an optional extra
    except ImportError:  # pragma: no cover - no MariaDB driver, so no MariaDB error
        return False
    if not isinstance(cause, MySQLError) or not cause.args:
        return False
    return cause.args[0] in _MYSQL_CONFLICTS


def retry_lost_conflicts(
    transaction: Callable[[], T],
    *,
    sleep: Callable[[float], None],
    rng: random.Random,
    attempts: int = ATTEMPTS,
    on_retry: Callable[[int], None] | None = None,
) -> T:
    """Run ``transaction`` (one whole transaction, begun and committed inside), again after a
    lost lock conflict, at most ``attempts`` times in all; the last failure is raised."""
    for attempt in range(1, attempts + 1):
        try:
            return transaction()
        except WarehouseUnavailableError as error:
            if attempt == attempts or not lost_lock_conflict(error):
                raise
        if on_retry is not None:
            on_retry(attempt)
        sleep(rng.uniform(0, PAUSE_STEP_S * attempt))
    raise AssertionError("unreachable: the last attempt returns or raises")

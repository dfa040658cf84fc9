"""The warehouse's connection pool: sized for the threads of the process, its waits measured.

SQLAlchemy's default pool (5 connections and 10 more on demand, a 30 s wait) was one size
for every process, while a daemon runs a tail per merchant, up to ``worker_threads`` snapshot
workers, the periodic jobs, the event receiver's workers and the probe port's: a few busy
merchants took every connection, and every other thread, the fleet's epoch raises among them,
queued for up to 30 s.  So the daemon sizes the pool from what it runs
(``PoolDemand``): one connection for each thread that may hold one, plus a few for the fleet's
own loop and the watchers.  Each checkout is timed (``CheckoutTimedPool``): the caller's
``observe`` sees every wait (a metric), and one longer than ``SLOW_CHECKOUT`` is logged with
the name of the thread that waited (at most a line a minute, counting the others), so a pool
that is still too small is seen, and by whom.

The lease's locks never come from this pool (``lease.connection``), so a pool wait never
keeps the lease keeper from its look.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import structlog
from sqlalchemy.pool import PoolProxiedConnection, QueuePool

from recordsync.core.log_throttle import LogThrottle

_log = structlog.get_logger(__name__)

POOL_TIMEOUT: Final = 30  # seconds a checkout waits for a connection before it fails
SLOW_CHECKOUT: Final = 1.0  # seconds: a checkout this slow is logged with its waiter
SLOW_CHECKOUT_LINE_INTERVAL: Final = 60.0  # seconds: at most one such line per pool in it
# The fleet's loop, the pause watch, the handed-over work's poll, a command's own reads.
SPARE_CONNECTIONS: Final = 4
# Unless the operator says how many (``RECORDSYNC_DB_POOL_SIZE``), no process opens more than
# this many: two replicas then stay inside PostgreSQL's default ``max_connections`` (100)
# with room for BI and the operators' commands.  Idle tails hold no connection, so a daemon
# of more merchants than this rarely waits; when one does, the wait is measured and logged.
MOST_CONNECTIONS: Final = 40


@dataclass(frozen=True, slots=True)
class PoolDemand:
    """The threads of one process that may each hold a warehouse connection at once."""

    merchants: int  # one tail each
    snapshot_workers: int
    periodic_threads: int
    event_workers: int
    request_threads: int
    configured: int = 0  # the operator's size (RECORDSYNC_DB_POOL_SIZE); 0: sized from the rest

    @property
    def wanted(self) -> int:
        """One connection for each thread that may hold one, and the spares."""
        return (
            self.merchants
            + self.snapshot_workers
            + self.periodic_threads
            + self.event_workers
            + self.request_threads
            + SPARE_CONNECTIONS
        )

    @property
    def size(self) -> int:
        return self.configured or min(self.wanted, MOST_CONNECTIONS)

    def engine_options(self) -> dict[str, Any]:
        """``create_engine`` options for a pool of ``size`` connections, none beyond it (a
        thread past them waits, at most ``POOL_TIMEOUT``, and is logged if it waits long)."""
        return {
            "poolclass": CheckoutTimedPool,
            "pool_size": self.size,
            "max_overflow": 0,
            "pool_timeout": POOL_TIMEOUT,
        }


class CheckoutTimedPool(QueuePool):
    """A ``QueuePool`` that times each checkout (the wait and a connect, if one was needed)."""

    observe: Callable[[float], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A pool too small for the load makes every checkout slow: a line for each would
        # grow the log as fast as the trouble.
        self.slow_lines: LogThrottle[str] = LogThrottle(SLOW_CHECKOUT_LINE_INTERVAL)

    def connect(self) -> PoolProxiedConnection:
        started = time.monotonic()
        connection = super().connect()
        waited = time.monotonic() - started
        if self.observe is not None:
            self.observe(waited)
        if waited >= SLOW_CHECKOUT and (count := self.slow_lines.due("slow")) is not None:
            _log.warning(
                "warehouse_pool_checkout_slow",
                waiter=threading.current_thread().name,
                seconds=round(waited, 3),
                pool_size=self.size(),
                checked_out=self.checkedout(),
                count=count,  # slow checkouts since the previous line, this one included
                interval_s=self.slow_lines.interval,
                action="the pool is too small for what this process runs, or the warehouse slow",
            )
        return connection

    def recreate(self) -> CheckoutTimedPool:
        """A fresh pool (``Engine.dispose``) that reports where this one did."""
        fresh = super().recreate()
        assert isinstance(fresh, CheckoutTimedPool)
        fresh.observe = self.observe
        fresh.slow_lines = self.slow_lines
        return fresh

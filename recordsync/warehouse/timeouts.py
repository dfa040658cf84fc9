"""Every wait on the database is bounded: the limits, their values and why.

A warehouse connection can wait on the database in three ways, and each has a bound here, on
the server's side (so that a process that stops talking, paused or cut off, lets go of what
it holds) and on ours (so that we never hang on a network that went silent):

- a lock: a row another transaction holds (the fence check's shared lock against the epoch
  raise, two pages' rows), a metadata lock behind DDL;
- the other end: a statement the server is still running, or a client that went silent in
  the middle of a transaction or of a statement;
- the network: unacknowledged bytes, a peer that no longer answers at all.

The numbers follow from the lease (``LEASE_SECONDS``, 10 s by default, ``RECORDSYNC_LEASE_SECONDS``;
a process's pool is built for its lease by ``writes``): a holder that stops talking loses
its merchant locks after the lease (the lock connection's own limits, ``lock_session``); by
then, every transaction it had open must be gone too, or the new holder's epoch raise would
wait behind its fence check's row lock (a takeover that never came).  So a
silent transaction ends after 5 s, half the lease, and so does a statement whose client went
silent in the middle of it (a COPY waiting for its rows): a statement may run 5 s (25 times a
page commit here), and then its transaction, aborted, waits for the client's rollback for at
most 5 s more: the row lock is free within the lease whatever the moment of the pause.  A
lock wait ends after 5 s too (a raise that finds the row still locked fails, and the next tick
tries again).  With another lease, each of these is half of it, and TCP gives a silent peer up
after about the lease.  Schema changes and index builds (``DDL``) may run for minutes: no
statement limit, but the same short lock waits, so that a DDL statement queued for a lock
never holds every page commit behind it (MariaDB's metadata locks queue that way); its caller
tries again.

The read commands (``status``, ``report``, the dry runs: ``READS``) run on the same kind of
bounds, looser where a person waits for a longer query, and ``status --check`` (``PROBE``), which
a container's health check or a script runs with a timeout of its own (Docker's 10 s in
``deploy/Dockerfile``), on tight ones: behind a table locked by a migration or a ``VACUUM
FULL`` its answer is "not ready" after a 2 s lock wait, never a probe timing out with no word.
SQLite has one bound for every wait, its busy timeout (``sqlite_busy``): a WAL reader waits only
for a writer in exclusive locking mode or a recovery, and the read commands wait seconds for it,
not the writers' 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from recordsync.core.settings import DEFAULT_LEASE_SECONDS

LEASE_SECONDS: Final = DEFAULT_LEASE_SECONDS  # RECORDSYNC_LEASE_SECONDS
CONNECT: Final = 10  # seconds to connect (both drivers): a cut network fails in time
# TCP on our side: a peer that stops acknowledging, or stops answering keepalive probes while
# we wait for an answer, is given up on after about the lease (``SessionLimits.network``):
# idle for half of it, then three probes, at most 5 s idle and 2 s apart (those of 10 s).
KEEPALIVE_IDLE: Final = 5
KEEPALIVE_INTERVAL: Final = 2
KEEPALIVE_COUNT: Final = 3


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """One kind of session's bounds, in seconds (0: none)."""

    lock_wait: int  # a row or table lock (PostgreSQL lock_timeout, innodb_lock_wait_timeout)
    metadata_lock_wait: int  # MariaDB lock_wait_timeout (DDL against DML)
    idle_in_transaction: int  # a client silent inside a transaction
    statement: int  # one statement running (0 for DDL)
    client_silence: int  # MariaDB net_read_timeout / net_write_timeout: mid-statement silence
    answer: int  # PyMySQL read_timeout: waiting for the server's answer (0: none)
    idle_session: int  # MariaDB wait_timeout: an idle pooled connection is closed
    sqlite_busy: int = 30  # SQLite busy_timeout: every wait on a lock of the file
    connect: int = CONNECT  # establishing a connection (both drivers' connect_timeout)
    network: int = LEASE_SECONDS  # TCP: a peer silent this long is given up on (PostgreSQL)


# The daemon's and the commands' pooled sessions: page commits, the fence, epochs, reads.
WRITES: Final = SessionLimits(
    lock_wait=LEASE_SECONDS // 2,
    metadata_lock_wait=10,
    idle_in_transaction=LEASE_SECONDS // 2,
    statement=LEASE_SECONDS // 2,
    client_silence=LEASE_SECONDS // 2,
    answer=30,
    idle_session=300,
)


def writes(lease_seconds: int = LEASE_SECONDS) -> SessionLimits:
    """``WRITES`` for a process whose lease is ``lease_seconds`` (at least 2): every bound that
    must end within the lease (module docstring) is half of it, TCP's is the lease."""
    half = lease_seconds // 2
    return replace(
        WRITES,
        lock_wait=half,
        idle_in_transaction=half,
        statement=half,
        client_silence=half,
        network=lease_seconds,
    )


# Migrations and BI index builds: long statements, short lock waits (and a retry above).
DDL: Final = SessionLimits(
    lock_wait=5,
    # MariaDB queues every page commit behind a DDL statement waiting for its metadata lock:
    # a second at most, then the statement gives up (and is tried again later).
    metadata_lock_wait=1,
    idle_in_transaction=60,
    statement=0,
    client_silence=60,
    answer=0,
    idle_session=300,
)
# The read commands (``status``, ``report``, the dry runs): a person's queries, bounded.  The
# statement limit is generous for ``report`` over a year of summaries; PyMySQL's own answer
# timeout is longer than it, so that the server's error, which names the limit, comes first.
READS: Final = SessionLimits(
    lock_wait=5,
    metadata_lock_wait=5,
    idle_in_transaction=30,
    statement=60,
    client_silence=30,
    answer=90,
    idle_session=300,
    sqlite_busy=5,
)
# ``status --check``: a probe's few small reads.  A lock wait ends after 2 s and a statement
# after 3 s, a connection attempt after 3 s: behind a lock the answer ("not ready", exit 1)
# comes in about 2 s, well inside the 5 s that ``PROBE_SECONDS`` documents.
PROBE: Final = SessionLimits(
    lock_wait=2,
    metadata_lock_wait=2,
    idle_in_transaction=5,
    statement=3,
    client_silence=5,
    answer=5,
    idle_session=60,
    sqlite_busy=2,
    connect=3,
)
PROBE_SECONDS: Final = 5  # what README and docs/operations.md promise for ``status --check``
# A pooled connection is recycled before the server's wait_timeout ends it.
POOL_RECYCLE: Final = 240


def postgres_connect_args(limits: SessionLimits) -> dict[str, object]:
    """libpq's connection parameters: our side's network bounds and the server's session
    settings (``options``), set once at connect, no round trip of their own."""
    settings = {
        "lock_timeout": f"{limits.lock_wait}s",
        "idle_in_transaction_session_timeout": f"{limits.idle_in_transaction}s",
        "statement_timeout": f"{limits.statement}s",
    }
    return {
        "connect_timeout": limits.connect,
        "keepalives": 1,
        "keepalives_idle": min(KEEPALIVE_IDLE, max(1, limits.network // 2)),
        "keepalives_interval": min(KEEPALIVE_INTERVAL, max(1, limits.network // 5)),
        "keepalives_count": KEEPALIVE_COUNT,
        "tcp_user_timeout": limits.network * 1000,
        "options": " ".join(f"-c {name}={value}" for name, value in settings.items()),
    }


def mariadb_connect_args(limits: SessionLimits) -> dict[str, object]:
    """PyMySQL's bounds on our side, and the server's session settings in one init command."""
    settings = {
        "innodb_lock_wait_timeout": limits.lock_wait,
        "lock_wait_timeout": limits.metadata_lock_wait,
        "idle_transaction_timeout": limits.idle_in_transaction,
        "max_statement_time": limits.statement,
        "net_read_timeout": limits.client_silence,
        "net_write_timeout": limits.client_silence,
        "wait_timeout": limits.idle_session,
    }
    assignments = ", ".join(f"{name} = {value}" for name, value in settings.items())
    args: dict[str, object] = {
        "connect_timeout": limits.connect,
        "init_command": f"SET SESSION time_zone = '+00:00', {assignments}",
    }
    if limits.answer:
        args["read_timeout"] = limits.answer
        args["write_timeout"] = limits.answer
    return args

"""Round-end notifications in the warehouse: storing them once, telling the other replicas,
and the cross-check's question "which announced rounds are still not in ``records``?".

Storing (``record``).  ``event_id`` is unique per merchant (spec: Events, "the merchant
de-duplicates by it": each merchant its own ids, so two merchants' ids may collide): a repeat
(the platform retries with the same id) finds the merchant's first row and returns its
``received_at``, changing nothing.  Two replicas storing the same event at once race on the
unique key; the loser's insert fails and the store (``RoundEventStore``) reads the winner's
row in a new transaction.

Telling the merchant's holder.  A notification may reach a replica that does not sync its
merchant (several replicas behind one ingress).  On PostgreSQL the insert's transaction sends
a NOTIFY on ``ROUND_EVENTS_CHANNEL`` (payload: the receiving replica and the merchant),
delivered when it commits; every replica LISTENs (``PostgresFeed``) and the holder wakes its
tail.  MariaDB and SQLite have no NOTIFY: ``PollFeed`` reads the rows added since its last look
(by ``id``), a cheap primary-key range scan every half second.  Either way a replica ignores
what it received itself: it woke its own tail while answering.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from sqlalchemy import Connection, Engine, func, insert, select, update
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.round_events import ROUND_ENDED, RoundEvent, RoundEventReceipt
from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.lease.connection import LockConnection
from recordsync.warehouse.schema import records, round_events
from recordsync.warehouse.timeouts import LEASE_SECONDS

ROUND_EVENTS_CHANNEL: Final = "recordsync_round_events"
# A bound on one cross-check's work and on one IN list.
_SCAN_LIMIT: Final = 10_000
_IN_BATCH: Final = 500
_BURST_SECONDS: Final = 0.005  # how long a wake-up waits for the rest of a burst


def find(conn: Connection, merchant_id: str, event_id: str) -> RoundEventReceipt | None:
    """The receipt of the merchant's event already stored (a duplicate), or None."""
    received_at = conn.execute(
        select(round_events.c.received_at).where(
            round_events.c.merchant_id == merchant_id, round_events.c.event_id == event_id
        )
    ).scalar_one_or_none()
    return None if received_at is None else RoundEventReceipt(received_at, duplicate=True)


def record(
    conn: Connection, event: RoundEvent, *, received_at: datetime, received_by: str
) -> RoundEventReceipt:
    """Store ``event`` unless its merchant knows its id; announce it to the other replicas on
    commit.

    Raises the driver's integrity error when another transaction stored the same event first.
    """
    known = find(conn, event.merchant_id, event.event_id)
    if known is not None:
        return known
    conn.execute(
        insert(round_events).values(
            event_id=event.event_id,
            merchant_id=event.merchant_id,
            round_id=event.round_id,
            parent_round_id=event.parent_round_id,
            external_player_id=event.external_player_id,
            currency=event.currency,
            type=event.type,
            occurred_at=event.occurred_at,
            received_at=received_at,
            received_by=received_by,
        )
    )
    if conn.dialect.name == "postgresql":
        payload = f"{received_by}\n{event.merchant_id}"
        conn.execute(select(func.pg_notify(ROUND_EVENTS_CHANNEL, payload)))
    return RoundEventReceipt(received_at, duplicate=False)


def last_id(conn: Connection) -> int:
    return int(conn.execute(select(func.coalesce(func.max(round_events.c.id), 0))).scalar_one())


def since(conn: Connection, after_id: int, limit: int = _SCAN_LIMIT) -> list[tuple[int, str, str]]:
    """(id, merchant_id, received_by) of the events stored after ``after_id``, by id."""
    rows = conn.execute(
        select(round_events.c.id, round_events.c.merchant_id, round_events.c.received_by)
        .where(round_events.c.id > after_id)
        .order_by(round_events.c.id)
        .limit(limit)
    )
    return [(int(row[0]), str(row[1]), str(row[2])) for row in rows]


def missing_rounds(
    conn: Connection, merchant_id: str, *, cutoff: datetime, now: datetime
) -> list[str]:
    """Round ids announced (``ROUND_ENDED``) before ``cutoff`` that ``records`` lacks, sorted.

    Rounds found are marked (``found_at = now``) and never looked at again; a round that
    arrives later is thus found at the next check, and drops out of the answer.
    """
    candidates = conn.execute(
        select(round_events.c.id, round_events.c.round_id)
        .where(
            round_events.c.merchant_id == merchant_id,
            round_events.c.found_at.is_(None),
            round_events.c.received_at < cutoff,
            round_events.c.type == ROUND_ENDED,
        )
        .order_by(round_events.c.received_at)
        .limit(_SCAN_LIMIT)
    ).all()
    by_round: dict[str, list[int]] = {}
    for row_id, round_id in candidates:
        by_round.setdefault(str(round_id), []).append(int(row_id))
    present: set[str] = set()
    round_ids = sorted(by_round)
    for start in range(0, len(round_ids), _IN_BATCH):
        batch = round_ids[start : start + _IN_BATCH]
        present.update(
            str(found)
            for found in conn.execute(
                select(records.c.round_id)
                .where(records.c.merchant_id == merchant_id, records.c.round_id.in_(batch))
                .distinct()
            ).scalars()
        )
    found_ids = [row_id for round_id in present for row_id in by_round[round_id]]
    for start in range(0, len(found_ids), _IN_BATCH):
        conn.execute(
            update(round_events)
            .where(round_events.c.id.in_(found_ids[start : start + _IN_BATCH]))
            .values(found_at=now)
        )
    return [round_id for round_id in round_ids if round_id not in present]


# -- telling the holder -------------------------------------------------------------------------


class RoundEventFeed(Protocol):
    """The merchants that other replicas accepted notifications for, as they come."""

    listens: bool  # woken by the database (PostgreSQL), or polling

    def wait(self, timeout: float) -> frozenset[str]:
        """Merchants announced by other replicas within ``timeout`` s (maybe none).

        Raises ``WarehouseUnavailableError`` when the warehouse cannot be asked; the next call
        tries again.
        """
        ...

    def close(self) -> None: ...


class PostgresFeed:
    """LISTENs on its own connection; psycopg keeps notifications that came meanwhile.

    The connection has the lock connections' settings, so the server ends it once it has sent
    nothing for ``lease_seconds`` (``idle_session_timeout``): waiting for a notification
    sends nothing, so each wait starts with a keep-alive and lasts at most half of that.
    Without it a quiet feed was ended every ten seconds, and the notifications sent while
    it reconnected woke nobody.
    """

    listens = True

    def __init__(self, url: URL, replica_id: str, *, lease_seconds: int = LEASE_SECONDS) -> None:
        self._replica_id = replica_id
        self._conn = LockConnection(url, lease_seconds=lease_seconds, on_connect=_listen)
        self._longest_wait = lease_seconds / 2

    def wait(self, timeout: float) -> frozenset[str]:
        timeout = min(timeout, self._longest_wait)
        return self._conn.run(lambda conn: self._notified(conn, timeout), "round events wait")

    def _notified(self, conn: Connection, timeout: float) -> frozenset[str]:
        import psycopg  # noqa: PLC0415 - PostgreSQL's driver, present whenever this runs

        driver: Any = conn.connection.driver_connection
        merchants: set[str] = set()
        try:
            driver.execute("SELECT 1")  # the keep-alive; what it receives waits in psycopg
            for note in driver.notifies(timeout=timeout, stop_after=1):
                merchants.update(_announced(note.payload, self._replica_id))
            # Whatever else follows at once: one wake-up per merchant for a burst.
            for note in driver.notifies(timeout=_BURST_SECONDS):
                merchants.update(_announced(note.payload, self._replica_id))
        except psycopg.Error as error:
            raise WarehouseUnavailableError(
                f"warehouse unavailable (round events wait): {type(error).__name__}"
            ) from error
        return frozenset(merchants)

    def close(self) -> None:
        self._conn.dispose()


def _listen(conn: Connection) -> None:
    conn.exec_driver_sql(f"LISTEN {ROUND_EVENTS_CHANNEL}")


def _announced(payload: str, me: str) -> Sequence[str]:
    replica, _, merchant_id = payload.partition("\n")
    return () if replica == me or not merchant_id else (merchant_id,)


class PollFeed:
    """Reads the rows added since its last look, every ``interval`` seconds."""

    listens = False

    def __init__(
        self,
        engine: Engine,
        replica_id: str,
        *,
        interval: float,
        sleep: Callable[[float], None],
    ) -> None:
        self._engine = engine
        self._replica_id = replica_id
        self._interval = interval
        self._sleep = sleep
        self._after: int | None = None  # read at the first look: older events are old news

    def wait(self, timeout: float) -> frozenset[str]:
        if self._after is None:
            with translate_errors("round events poll"), self._engine.connect() as conn:
                self._after = last_id(conn)
        self._sleep(min(timeout, self._interval))
        with translate_errors("round events poll"), self._engine.connect() as conn:
            rows = since(conn, self._after)
        if rows:
            self._after = rows[-1][0]
        return frozenset(merchant_id for _id, merchant_id, by in rows if by != self._replica_id)

    def close(self) -> None:
        pass


def _utc_now() -> datetime:
    return datetime.now(UTC)


class RoundEventStore:
    """The round-end notifications on the warehouse's engine, each call one transaction of
    its own (module docstring).  ``clock`` is this warehouse's: ``received_at``, and the
    cross-check's grace, are measured by it."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        self._clock = clock

    def record_round_event(self, event: RoundEvent, *, received_by: str) -> RoundEventReceipt:
        """Store a verified notification once per merchant; a repeated ``event_id`` of the
        merchant gets the first one's receipt and changes nothing."""
        try:
            with translate_errors("record round event"), self._writer.begin() as conn:
                return record(conn, event, received_at=self._clock(), received_by=received_by)
        except IntegrityError:
            # Another replica stored the same event a moment ago: answer with its receipt.
            with translate_errors("record round event"), self._engine.begin() as conn:
                known = find(conn, event.merchant_id, event.event_id)
            if known is None:
                raise
            return known

    def rounds_announced_missing(self, merchant_id: str, grace_seconds: float) -> list[str]:
        """Round ids announced more than ``grace_seconds`` ago that ``records`` still lacks;
        rounds found meanwhile are marked and not asked again."""
        now = self._clock()
        with translate_errors("cross-check round events"), self._writer.begin() as conn:
            return missing_rounds(
                conn, merchant_id, cutoff=now - timedelta(seconds=grace_seconds), now=now
            )

    def round_event_feed(
        self,
        replica_id: str,
        *,
        poll_interval: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> RoundEventFeed:
        """What tells ``replica_id`` of the notifications other replicas accepted: a LISTEN
        on PostgreSQL (its own connection), a poll of ``round_events`` elsewhere."""
        if self._engine.dialect.name == "postgresql":
            return PostgresFeed(self._engine.url, replica_id)
        return PollFeed(self._engine, replica_id, interval=poll_interval, sleep=sleep)

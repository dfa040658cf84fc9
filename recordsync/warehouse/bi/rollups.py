"""Keeping the daily summaries' totals: folding the triggers' deltas, building the old days.

Revision 0015 explains the tables and why the views are exact at every moment; here is the
work that keeps them fast, run by the merchant's holder in short transactions:

- ``fold``: a bounded batch of the merchant's ``summary_deltas`` deleted and added to
  ``daily_game_totals`` and ``daily_player_totals`` in one transaction, so the views see
  either the deltas or the totals they became, never both.  The deltas are only ever
  appended by the triggers, so the fold takes no lock a page commit waits for but its own
  batch's rows (PostgreSQL ``FOR UPDATE SKIP LOCKED``; MariaDB ``FOR UPDATE`` under READ
  COMMITTED).
- ``build_next_day``: the next UTC day of ``summary_builds`` (the days whose rows predate the
  triggers) made exact in its totals: from ``next_day`` up to the first day holding rows, the
  totals are replaced by an aggregation of those rows and the deltas deleted, and
  ``next_day`` moves past it, in one transaction that sees the rows, the deltas and the
  totals at one moment:

  - PostgreSQL: one REPEATABLE READ snapshot.  A page committed after it keeps its deltas
    (the snapshot does not see them to delete) and its rows are not in the aggregation: the
    two agree.  A fold or a build committed after it makes this one fail to serialize, and it
    runs again.
  - MariaDB: DML reads the newest rows, not a snapshot, so the build takes the merchant's
    lease row ``FOR UPDATE`` first (every fenced page commit reads it ``LOCK IN SHARE MODE``
    before writing: the ones in flight finish, the next ones wait for this one) and reads the
    day's rows with locking reads under REPEATABLE READ (a writer that fences nothing waits
    on their next-key locks).  One day of one merchant: the pause is that of one aggregation.
  - SQLite: one writer at a time.

  Idempotent: killed at any instant, the transaction rolls back and the day is built again.
- ``maintain``: the holder's periodic run: folds until the deltas are gone or the batches
  are spent, then builds one day.  The views never wait for it; only their speed does.
"""

# ruff: noqa: S608 - every statement is built from this module's own names, never from input

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final, Protocol, TypeVar

import structlog
from sqlalchemy import Connection, Engine, text

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.schema import SUMMARY_AMOUNTS, summed_columns

_log = structlog.get_logger(__name__)

# Deltas per fold transaction: a page of 1000 records makes up to 2000, so one batch folds a
# few pages in some tens of milliseconds.
FOLD_BATCH: Final = 5000
# Seconds a maintenance run starts fold batches for, before it builds a day and gives its
# thread back: a daemon told to stop waits for one run, so a run stays short.
FOLD_BUDGET_S: Final = 0.5
_SPLIT: Final = 100_000_000  # 10**8, the split of SQLite's units (revision 0003)
_SUBJECTS: Final = (("daily_game_totals", "game_id"), ("daily_player_totals", "player_id"))


@dataclass(frozen=True, slots=True)
class BuildProgress:
    """Where a merchant's build of its old days stands; ``next_day`` None once done."""

    merchant_id: str
    first_day: date
    next_day: date | None
    last_day: date

    @property
    def done(self) -> bool:
        return self.next_day is None

    @property
    def days_total(self) -> int:
        return (self.last_day - self.first_day).days + 1

    @property
    def days_left(self) -> int:
        return 0 if self.next_day is None else (self.last_day - self.next_day).days + 1


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What one maintenance run did: deltas folded, and the day built (if any)."""

    folded: int
    built: BuildProgress | None


def _backend(engine: Engine) -> str:
    name = engine.dialect.name
    return "mysql" if name in MYSQL_FAMILY else name


def _day_of(value: Any) -> date:
    """A ``created_at`` or a day as each driver returns it, as a UTC day."""
    if isinstance(value, str):  # SQLite: ISO-8601 UTC text
        return date.fromisoformat(value[:10])
    if isinstance(value, datetime):
        return (value.astimezone(UTC) if value.tzinfo is not None else value).date()
    if isinstance(value, date):
        return value
    raise TypeError(f"not a day: {value!r}")


class _Dialect:
    """The SQL of one backend: binding days and times, and the aggregation of rows."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.measures = summed_columns("sqlite" if backend == "sqlite" else "postgresql")

    def day(self, value: date) -> Any:
        return value.isoformat() if self.backend == "sqlite" else value

    def start(self, value: date) -> Any:
        """The first instant of ``value`` as ``records.created_at`` compares with it."""
        if self.backend == "sqlite":
            return value.isoformat()  # 'YYYY-MM-DD' sorts before that day's every time
        midnight = datetime(value.year, value.month, value.day, tzinfo=UTC)
        return midnight if self.backend == "postgresql" else midnight.replace(tzinfo=None)

    def aggregates(self) -> list[str]:
        """The measures of a group of ``records`` rows, in ``measures`` order."""
        values = ["COUNT(*)"]
        values += [
            f"SUM(CASE WHEN status = '{status}' THEN 1 ELSE 0 END)"
            for status in ("OPEN", "SETTLED", "VOID")
        ]
        for amount in SUMMARY_AMOUNTS:
            if self.backend == "sqlite":
                units = f"{amount}_units"
                values += [
                    f"COUNT({units})",
                    f"COALESCE(SUM({units} / {_SPLIT}), 0)",
                    f"COALESCE(SUM({units} % {_SPLIT}), 0)",
                ]
            else:
                values.append(f"SUM({amount}_amount)")
        return values

    def upsert_sums(self, table: str, keys: Sequence[str], source: str) -> str:
        """``INSERT INTO table`` the grouped ``source``, adding to the groups already there."""
        columns = ", ".join([*keys, *self.measures])
        if self.backend == "mysql":
            sets = ", ".join(f"{m} = {table}.{m} + VALUES({m})" for m in self.measures)
            return f"INSERT INTO {table} ({columns}) {source} ON DUPLICATE KEY UPDATE {sets}"
        sets = ", ".join(f"{m} = {table}.{m} + excluded.{m}" for m in self.measures)
        conflict = ", ".join(keys)
        return (
            f"INSERT INTO {table} ({columns}) {source} "
            f"ON CONFLICT ({conflict}) DO UPDATE SET {sets}"
        )


T = TypeVar("T")


class Retry(Protocol):
    def __call__(self, work: Callable[[], T], /) -> T: ...


def _once(work: Callable[[], T]) -> T:
    return work()


class SummaryStore:
    """The rollups of the warehouse's engine (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        *,
        retry: Retry = _once,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``retry`` runs a transaction again when the server rolled it back for a lock
        conflict or a failed serialization (the store's ``conflicts``), which only means that
        a fold or a build ran beside this one."""
        self._backend = _backend(engine)
        self._sql = _Dialect(self._backend)
        writer = engine.execution_options(**{WRITE_OPTION: True})
        self._engine = engine
        self._folder = writer
        self._builder = writer
        if self._backend == "mysql":
            self._folder = writer.execution_options(isolation_level="READ COMMITTED")
            self._builder = writer.execution_options(isolation_level="REPEATABLE READ")
        elif self._backend == "postgresql":
            self._builder = writer.execution_options(isolation_level="REPEATABLE READ")
        self._retry = retry
        self._clock = clock

    # -- folding -------------------------------------------------------------------------

    def fold(self, merchant_id: str, *, batch: int = FOLD_BATCH) -> int:
        """Fold up to ``batch`` of the merchant's deltas into the totals; how many."""

        def transaction() -> int:
            with translate_errors("fold summary deltas"), self._folder.begin() as conn:
                if self._backend == "postgresql":
                    return self._fold_postgres(conn, merchant_id, batch)
                return self._fold_by_ids(conn, merchant_id, batch)

        return self._retry(transaction)

    def _fold_postgres(self, conn: Connection, merchant_id: str, batch: int) -> int:
        measures = ", ".join(self._sql.measures)
        sums = ", ".join(f"SUM({m})" for m in self._sql.measures)
        parts = [
            (
                "WITH batch AS (SELECT id FROM summary_deltas WHERE merchant_id = :m "
                "LIMIT :n FOR UPDATE SKIP LOCKED), "
                "d AS (DELETE FROM summary_deltas WHERE id IN (SELECT id FROM batch) "
                f"RETURNING merchant_id, day, game_id, player_id, currency, {measures})"
            )
        ]
        for index, (table, subject) in enumerate(_SUBJECTS):
            keys = ("merchant_id", "day", subject, "currency")
            group = ", ".join(keys)
            source = f"SELECT {group}, {sums} FROM d GROUP BY {group} ORDER BY {group}"
            parts.append(f"u{index} AS ({self._sql.upsert_sums(table, keys, source)})")
        statement = ", ".join(parts) + " SELECT COUNT(*) FROM d"
        return int(conn.execute(text(statement), {"m": merchant_id, "n": batch}).scalar_one())

    def _fold_by_ids(self, conn: Connection, merchant_id: str, batch: int) -> int:
        """MariaDB and SQLite: the batch's ids locked (MariaDB) and named in both steps."""
        lock = " FOR UPDATE" if self._backend == "mysql" else ""
        ids = [
            int(found)
            for found in conn.execute(
                text(f"SELECT id FROM summary_deltas WHERE merchant_id = :m LIMIT :n{lock}"),
                {"m": merchant_id, "n": batch},
            ).scalars()
        ]
        if not ids:
            return 0
        named = ", ".join(str(found) for found in sorted(ids))  # integers from the database
        sums = ", ".join(f"SUM({m})" for m in self._sql.measures)
        for table, subject in _SUBJECTS:
            keys = ("merchant_id", "day", subject, "currency")
            group = ", ".join(keys)
            source = (
                f"SELECT {group}, {sums} FROM summary_deltas WHERE id IN ({named}) "
                f"GROUP BY {group} ORDER BY {group}"
            )
            conn.execute(text(self._sql.upsert_sums(table, keys, source)))
        conn.execute(text(f"DELETE FROM summary_deltas WHERE id IN ({named})"))
        return len(ids)

    # -- building the days older than the triggers ---------------------------------------

    def build_progress(self, merchant_id: str | None = None) -> list[BuildProgress]:
        """The builds still under way (of ``merchant_id``, or of every merchant)."""
        where = "" if merchant_id is None else " WHERE merchant_id = :m"
        with translate_errors("read summary builds"), self._engine.begin() as conn:
            rows = conn.execute(
                text(
                    "SELECT merchant_id, first_day, next_day, last_day FROM summary_builds"
                    f"{where} ORDER BY merchant_id"
                ),
                {"m": merchant_id},
            ).all()
        return [
            BuildProgress(str(m), _day_of(first), _day_of(after), _day_of(last))
            for m, first, after, last in rows
        ]

    def build_next_day(self, merchant_id: str) -> BuildProgress | None:
        """Build the merchant's next old day (module docstring); where the build then stands,
        or None when there was nothing to build."""

        def transaction() -> BuildProgress | None:
            with translate_errors("build summary totals"), self._builder.begin() as conn:
                return self._build(conn, merchant_id)

        return self._retry(transaction)

    def _build(self, conn: Connection, merchant_id: str) -> BuildProgress | None:
        sql, params = self._sql, {"m": merchant_id}
        if self._backend == "mysql":
            conn.execute(
                text("SELECT epoch FROM merchant_leases WHERE merchant_id = :m FOR UPDATE"), params
            ).all()
        row = conn.execute(
            text("SELECT first_day, next_day, last_day FROM summary_builds WHERE merchant_id = :m"),
            params,
        ).one_or_none()
        if row is None:
            return None
        first_day, next_day, last_day = (_day_of(value) for value in row)
        share = " LOCK IN SHARE MODE" if self._backend == "mysql" else ""
        found = conn.execute(
            text(
                "SELECT MIN(created_at) FROM records WHERE merchant_id = :m "
                f"AND created_at >= :start AND created_at < :end{share}"
            ),
            {**params, "start": sql.start(next_day), "end": sql.start(last_day + timedelta(1))},
        ).scalar_one_or_none()
        built = None if found is None else _day_of(found)
        upto = last_day if built is None else built
        span = {**params, "from": sql.day(next_day), "upto": sql.day(upto)}
        for table, _subject in _SUBJECTS:
            conn.execute(
                text(
                    f"DELETE FROM {table} WHERE merchant_id = :m AND day >= :from AND day <= :upto"
                ),
                span,
            )
        if built is not None:
            self._aggregate_day(conn, merchant_id, built)
        conn.execute(
            text(
                "DELETE FROM summary_deltas WHERE merchant_id = :m "
                "AND day >= :from AND day <= :upto"
            ),
            span,
        )
        if upto >= last_day:
            conn.execute(text("DELETE FROM summary_builds WHERE merchant_id = :m"), params)
            after = None
        else:
            after = upto + timedelta(days=1)
            conn.execute(
                text("UPDATE summary_builds SET next_day = :after WHERE merchant_id = :m"),
                {**params, "after": sql.day(after)},
            )
        return BuildProgress(merchant_id, first_day, after, last_day)

    def _aggregate_day(self, conn: Connection, merchant_id: str, day: date) -> None:
        """The day's totals from its rows, through the (merchant_id, created_at) index."""
        sql = self._sql
        aggregates = ", ".join(sql.aggregates())
        bounds = {
            "m": merchant_id,
            "day": sql.day(day),
            "start": sql.start(day),
            "end": sql.start(day + timedelta(days=1)),
        }
        for table, subject in _SUBJECTS:
            keys = ("merchant_id", "day", subject, "currency")
            source = (
                f"SELECT merchant_id, :day, {subject}, currency, {aggregates} "
                "FROM records WHERE merchant_id = :m AND created_at >= :start "
                f"AND created_at < :end GROUP BY merchant_id, {subject}, currency"
            )
            # MariaDB, REPEATABLE READ: INSERT ... SELECT takes shared next-key locks on the
            # rows it reads (module docstring).
            conn.execute(text(sql.upsert_sums(table, keys, source)), bounds)

    # -- the holder's periodic run -------------------------------------------------------

    def maintain(self, merchant_id: str, *, budget_s: float = FOLD_BUDGET_S) -> Maintenance:
        """Fold until no delta is left or ``budget_s`` is spent, then build one old day."""
        deadline = self._clock() + budget_s
        folded = 0
        while True:
            count = self.fold(merchant_id)
            folded += count
            if count < FOLD_BATCH or self._clock() >= deadline:
                break
        built = self.build_next_day(merchant_id)
        if built is not None:
            _log.info(
                "summary_day_built",
                merchant_id=merchant_id,
                days_left=built.days_left,
                days_total=built.days_total,
                next_day=None if built.next_day is None else built.next_day.isoformat(),
            )
        return Maintenance(folded=folded, built=built)

    def build_all(self, merchant_id: str, *, on_day: Callable[[BuildProgress], None]) -> int:
        """Build every old day of the merchant, one transaction a day; the days built."""
        days = 0
        while (progress := self.build_next_day(merchant_id)) is not None:
            days += 1
            on_day(progress)
            if progress.done:
                break
        return days

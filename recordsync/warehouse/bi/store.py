"""The BI store: the indexes a first bulk load leaves out (``indexes``) and the reads of the
BI views (``summaries``), each call one transaction of its own, its errors translated."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from recordsync.core.errors import PermissionDeniedError, WarehouseUnavailableError
from recordsync.warehouse.bi import indexes, summaries
from recordsync.warehouse.connection import translate_errors
from recordsync.warehouse.values import DailySummary, Freshness

_log = structlog.get_logger(__name__)


class BIStore:
    """The BI side of the warehouse's engine.  ``schema_engine`` gives where schema changes
    run (the warehouse builds it when first needed); ``sleep`` is an index build's wait."""

    def __init__(
        self,
        engine: Engine,
        *,
        schema_engine: Callable[[], Engine],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._engine = engine
        self._schema_engine = schema_engine
        self._sleep = sleep

    # -- the BI indexes (indexes) ------------------------------------------------------------

    def build_bi_indexes(self, merchant_id: str | None = None) -> list[str]:
        """Build the BI indexes of ``records`` that are missing; the names built.

        A new snapshot job into an empty ``records`` drops them (``defer_bi_indexes``): a
        bulk load without them writes about half as much per record (bench/README.md, 7).
        They are derived data that nothing the sync's correctness rests on reads, so building
        them late only makes reads slower meanwhile.  Idempotent, and online where the
        database can (``indexes``); ``merchant_id`` only names, in the log, whose job end or
        start asked.  A failure other than an outage (an account that may not change the
        schema) is logged and leaves them missing: ``recordsync migrate`` builds them too.
        """
        started = time.perf_counter()
        try:
            with translate_errors("build BI indexes"):
                built = indexes.build(self._schema_engine(), sleep=self._sleep)
        except (DBAPIError, PermissionDeniedError) as error:
            _log.error(
                "bi_indexes_build_failed",
                merchant_id=merchant_id,
                error=str(getattr(error, "orig", error)),
                action="reports and dashboards run without them: run `recordsync migrate` "
                "with an account that may change the schema",
            )
            return []
        if built:
            _log.info(
                "bi_indexes_built",
                merchant_id=merchant_id,
                indexes=built,
                seconds=round(time.perf_counter() - started, 3),
            )
        return built

    def missing_bi_indexes(self, merchant_id: str | None = None) -> list[str]:
        """The BI indexes of ``records`` to build (absent, or left invalid by a dead build),
        and the retired ones to drop (an older replica built them again); the same for every
        merchant (``merchant_id`` is the sync's port's shape)."""
        with translate_errors("read BI indexes"), self._engine.connect() as conn:
            return [*indexes.missing(conn), *indexes.retired(conn)]

    def defer_bi_indexes(self, merchant_id: str, job: str) -> None:
        """A new job starts: leave the BI indexes out if ``records`` is empty (a first bulk
        load).  Not deferring is always safe, so a failure here only says so."""
        try:
            with translate_errors("defer BI indexes"):
                dropped = indexes.defer(self._schema_engine())
        except (DBAPIError, PermissionDeniedError, WarehouseUnavailableError) as error:
            _log.warning(
                "bi_indexes_not_deferred",
                merchant_id=merchant_id,
                job=job,
                error=str(error),
                action="the load keeps them up to date as it goes",
            )
            return
        if dropped:
            _log.info(
                "bi_indexes_deferred",
                merchant_id=merchant_id,
                job=job,
                indexes=dropped,
                until="the job's last window is done",
            )

    # -- the BI views (docs/bi.md; summaries) --------------------------------------------------

    def newest_record_day(self, merchant_id: str) -> date | None:
        """The UTC day of the merchant's newest record (by created_at); None when there is none.

        Reports count their days back from here, not from the local clock: a warehouse
        restored from a backup, or a sync that stopped, still reports its latest data.
        """
        with translate_errors("read newest day"), self._engine.begin() as conn:
            return summaries.newest_record_day(conn, merchant_id)

    def daily_summaries(
        self, merchant_id: str, *, per: str, first_day: date, last_day: date
    ) -> list[DailySummary]:
        """``daily_game_summary`` (per="game") or ``daily_player_summary`` (per="player")
        rows for the UTC days ``first_day`` to ``last_day`` inclusive."""
        with translate_errors("read daily summaries"), self._engine.begin() as conn:
            return summaries.daily_summaries(
                conn, merchant_id, per=per, first_day=first_day, last_day=last_day
            )

    def freshness(self, merchant_id: str) -> Freshness | None:
        """The merchant's row of ``sync_freshness``; None before the first (re)build."""
        with translate_errors("read freshness"), self._engine.begin() as conn:
            return summaries.freshness(conn, merchant_id)

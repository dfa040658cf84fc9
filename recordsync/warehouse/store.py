"""The warehouse: rows and the cursors that cover them, always committed together.

Every write method is ONE transaction: the upserted rows, the revision history (see
``revisions``), the quarantined items and the cursor (a window's or the tail's) commit
together or not at all, so after any failure the sync re-reads from a cursor that covers
exactly what is stored (no gap, no orphan cursor).
Any "server gone" error is raised as ``WarehouseUnavailableError`` (see ``connection``) after
the transaction has rolled back; the caller waits and tries again with the same page.

The warehouse never calls the platform and never decides what to read next: it stores what
the sync hands it and answers what was stored.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, date, datetime
from typing import Any

import orjson
from sqlalchemy import (
    Connection,
    Engine,
    Row,
    case,
    delete,
    func,
    insert,
    select,
    update,
)

from recordsync.core.errors import ConfigurationError
from recordsync.core.models import Record, RecordChange, RejectedItem
from recordsync.core.state import REBUILD_JOB, Phase, SyncState, Window, WindowProgress
from recordsync.warehouse import summaries
from recordsync.warehouse.connection import (
    SUPPORTED_BACKENDS,
    WRITE_OPTION,
    check_driver,
    create_warehouse_engine,
    translate_errors,
)
from recordsync.warehouse.migrate import upgrade as upgrade_schema
from recordsync.warehouse.page_writer import PageWriter, page_writer_for
from recordsync.warehouse.schema import (
    quarantined_records,
    record_revisions,
    records,
    snapshot_windows,
    sync_state,
)
from recordsync.warehouse.staging import stage_page
from recordsync.warehouse.upsert import collapse, split_unstorable
from recordsync.warehouse.values import (
    DailySummary,
    Freshness,
    JobStatus,
    QuarantinedRecord,
    WarehouseStatus,
    WriteResult,
)

TAIL_SOURCE = "tail"


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _safe_text(value: str) -> str:
    """PostgreSQL text cannot hold NUL; a bad item's id or reason may contain one."""
    return value.replace("\x00", "\ufffd")


class Warehouse:
    """The sync's storage; see the module docstring for the transaction rules.

    ``engine`` is injected; ``Warehouse.connect(url)`` builds one with the session settings
    each backend needs.  ``clock`` stamps ``synced_at``, ``updated_at`` and ``quarantined_at``
    only: bookkeeping, never a sync boundary.  ``keep_revisions=False`` switches the revision
    history off: nothing is written to ``record_revisions`` and the write path does no extra
    work at all.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], datetime] = _utc_now,
        keep_revisions: bool = True,
    ) -> None:
        backend = engine.dialect.name
        if backend not in SUPPORTED_BACKENDS:
            raise ConfigurationError(
                f"unsupported warehouse database {backend!r}: use SQLite, PostgreSQL or MariaDB"
            )
        check_driver(backend, engine.dialect.driver)
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        self._clock = clock
        self._keep_revisions = keep_revisions
        self._page_writer: PageWriter | None = None  # compiled at the first write (see there)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        clock: Callable[[], datetime] = _utc_now,
        keep_revisions: bool = True,
        **engine_options: Any,
    ) -> Warehouse:
        """A warehouse on a new engine for ``url``; ``engine_options`` go to create_engine."""
        return cls(
            create_warehouse_engine(url, **engine_options),
            clock=clock,
            keep_revisions=keep_revisions,
        )

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def keep_revisions(self) -> bool:
        return self._keep_revisions

    @property
    def concurrent_writes(self) -> bool:
        """Whether page commits may run side by side, or should wait for one another.

        PostgreSQL: yes.  Each page locks its rows in key order and takes no gap locks, so
        concurrent pages cannot deadlock, and the server's merge work for one page overlaps
        the next page's fetch and encoding (bench/README.md, ingest: about a quarter more
        records per second).  SQLite has one writer at a time anyway (waiting in Python is
        cheaper than in the busy handler), and MariaDB's REPEATABLE READ gap locks can
        deadlock upserts into neighbouring keys: both write one page at a time.
        """
        return self._engine.dialect.name == "postgresql"

    def migrate(self) -> None:
        """Apply every pending Alembic revision (idempotent)."""
        with translate_errors("migrate"):
            upgrade_schema(self._writer)

    def ping(self) -> None:
        with translate_errors("ping"), self._engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1").scalar_one()

    def close(self) -> None:
        """Close pooled connections; safe to call twice."""
        self._engine.dispose()

    # -- state ---------------------------------------------------------------------------

    def load_state(self, merchant_id: str) -> SyncState | None:
        with translate_errors("load state"), self._engine.begin() as conn:
            return _load_state(conn, merchant_id)

    def load_windows(self, merchant_id: str, job: str) -> list[WindowProgress]:
        """The job's windows ordered by start."""
        with translate_errors("load windows"), self._engine.begin() as conn:
            return _load_windows(conn, merchant_id, job)

    def start_rebuild(
        self,
        merchant_id: str,
        *,
        change_cursor: str,
        anchor_at: datetime,
        history_from: datetime,
        snapshot_to: datetime,
        windows: Sequence[Window],
    ) -> SyncState:
        """Anchor a (re)build: new tail cursor and a fresh set of rebuild windows, atomically.

        Spec, Records endpoints, "Rebuild without gaps": the anchor cursor is saved before the
        history is read.  Stored rows are kept: the rebuild's snapshot and tail overwrite them
        only with higher revisions.  ``last_sequence`` and ``last_projection_as_of`` are
        cleared because they described the old change cursor.
        """
        _check_windows(windows)
        now = self._clock()
        phase = Phase.SNAPSHOT if windows else Phase.TAILING
        values = {
            "phase": phase.value,
            "change_cursor": change_cursor,
            "anchor_at": anchor_at,
            "history_from": history_from,
            "snapshot_to": snapshot_to,
            "last_sequence": None,
            "last_projection_as_of": None,
            "last_commit_at": now,
            "updated_at": now,
        }
        with translate_errors("start rebuild"), self._writer.begin() as conn:
            previous = conn.execute(
                select(sync_state.c.rebuilds)
                .where(sync_state.c.merchant_id == merchant_id)
                .with_for_update()
            ).scalar_one_or_none()
            if previous is None:
                conn.execute(
                    insert(sync_state).values(merchant_id=merchant_id, rebuilds=0, **values)
                )
            else:
                conn.execute(
                    update(sync_state)
                    .where(sync_state.c.merchant_id == merchant_id)
                    .values(rebuilds=previous + 1, **values)
                )
            conn.execute(
                delete(snapshot_windows).where(
                    snapshot_windows.c.merchant_id == merchant_id,
                    snapshot_windows.c.job == REBUILD_JOB,
                )
            )
            _insert_windows(conn, merchant_id, REBUILD_JOB, windows, now)
            state = _load_state(conn, merchant_id)
        assert state is not None
        return state

    def ensure_job(
        self, merchant_id: str, job: str, windows: Sequence[Window]
    ) -> list[WindowProgress]:
        """Register a one-shot backfill's windows once; later calls return its progress.

        Never touches ``sync_state``: a backfill runs beside the tail, not instead of it.
        """
        if job == REBUILD_JOB:
            raise ValueError("the rebuild job's windows are set by start_rebuild()")
        _check_windows(windows)
        with translate_errors("ensure job"), self._writer.begin() as conn:
            known = conn.execute(
                select(func.count())
                .select_from(snapshot_windows)
                .where(snapshot_windows.c.merchant_id == merchant_id, snapshot_windows.c.job == job)
            ).scalar_one()
            if not known:
                _insert_windows(conn, merchant_id, job, windows, self._clock())
            return _load_windows(conn, merchant_id, job)

    def commit_window_page(
        self,
        merchant_id: str,
        job: str,
        window: Window,
        *,
        records: Sequence[Record],
        rejected: Sequence[RejectedItem],
        next_cursor: str | None,
        cursor_issued_at: datetime | None,
        done: bool,
        position: str,
    ) -> WriteResult:
        """Store one snapshot page and move its window's cursor, in one transaction.

        When this commit finishes the last rebuild window, the phase becomes TAILING in the
        same transaction.  The sync_state row is locked before counting the windows still
        open, so two windows finishing at once cannot both miss that they were the last.
        """
        now = self._clock()
        with translate_errors("commit window page"), self._writer.begin() as conn:
            result = self._write_rows(
                conn,
                merchant_id,
                batch=records,
                rejected=rejected,
                source=job,
                position=position,
                now=now,
            )
            moved = conn.execute(
                _window_update(merchant_id, job, window).values(
                    cursor=next_cursor,
                    cursor_issued_at=cursor_issued_at,
                    done=done,
                    records=snapshot_windows.c.records + result.records,
                    updated_at=now,
                )
            )
            if moved.rowcount != 1:
                raise LookupError(f"no window {_window_name(merchant_id, job, window)}")
            if job == REBUILD_JOB and done:
                _finish_rebuild_if_complete(conn, merchant_id, now)
        return result

    def restart_window(self, merchant_id: str, job: str, window: Window) -> None:
        """Forget a window's cursor after 410 CURSOR_EXPIRED, so its chain starts over.

        Its record count restarts too: the new chain reads the window from its beginning.
        Rows already stored stay; the new chain rewrites them only with higher revisions.
        """
        with translate_errors("restart window"), self._writer.begin() as conn:
            moved = conn.execute(
                _window_update(merchant_id, job, window).values(
                    cursor=None, cursor_issued_at=None, records=0, updated_at=self._clock()
                )
            )
            if moved.rowcount != 1:
                raise LookupError(f"no window {_window_name(merchant_id, job, window)}")

    def commit_tail_page(
        self,
        merchant_id: str,
        *,
        records: Sequence[Record],
        rejected: Sequence[RejectedItem],
        next_cursor: str,
        last_sequence: str | None,
        projection_as_of: datetime | None,
        position: str,
        changes: Sequence[RecordChange] = (),
    ) -> WriteResult:
        """Store one change page and move the change cursor, in one transaction.

        ``last_sequence`` and ``last_projection_as_of`` keep their old values when the page
        brings none (an empty page, or an answer without projection_as_of).  ``records`` is
        what the records upsert collapses (the changes' records); ``changes``, the page's
        changes, give the revision history every revision with its sequence and changed_at.
        Without them the history gets ``records`` with no sequence.
        """
        now = self._clock()
        values: dict[str, Any] = {
            "change_cursor": next_cursor,
            "last_commit_at": now,
            "updated_at": now,
        }
        if last_sequence is not None:
            values["last_sequence"] = last_sequence
        if projection_as_of is not None:
            values["last_projection_as_of"] = projection_as_of
        with translate_errors("commit tail page"), self._writer.begin() as conn:
            result = self._write_rows(
                conn,
                merchant_id,
                batch=records,
                rejected=rejected,
                source=TAIL_SOURCE,
                position=position,
                now=now,
                changes=changes,
            )
            moved = conn.execute(
                update(sync_state).where(sync_state.c.merchant_id == merchant_id).values(values)
            )
            if moved.rowcount != 1:
                raise LookupError(f"no sync state for merchant {merchant_id!r}: start a rebuild")
        return result

    def _write_rows(
        self,
        conn: Connection,
        merchant_id: str,
        *,
        batch: Sequence[Record],
        rejected: Sequence[RejectedItem],
        source: str,
        position: str,
        now: datetime,
        changes: Sequence[RecordChange] = (),
    ) -> WriteResult:
        rows, unfit = split_unstorable(collapse(batch))
        quarantine = [
            {
                "merchant_id": merchant_id,
                "source": source,
                "position": f"{position}#{item.position}",
                "record_id": None if item.record_id is None else _safe_text(item.record_id),
                "reason": _safe_text(item.reason),
                "raw_json": item.raw.decode("utf-8", errors="replace"),
                "quarantined_at": now,
            }
            for item in rejected
        ]
        # A parsed record the columns cannot hold: kept as JSON of what was parsed.
        quarantine.extend(
            {
                "merchant_id": merchant_id,
                "source": source,
                "position": f"{position}#record_id={_safe_text(record.record_id)[:64]}",
                "record_id": _safe_text(record.record_id),
                "reason": reason,
                "raw_json": orjson.dumps(record, default=str).decode(),
                "quarantined_at": now,
            }
            for record, reason in unfit
        )
        staged = stage_page(rows, changes, keep_revisions=self._keep_revisions)
        self._writer_for(conn).write(conn, merchant_id, staged, now)
        if quarantine:
            conn.execute(insert(quarantined_records), quarantine)
        return WriteResult(records=len(rows), quarantined=len(quarantine))

    def _writer_for(self, conn: Connection) -> PageWriter:
        """Compiled against the connected dialect: MariaDB's syntax depends on the server."""
        if self._page_writer is None:
            self._page_writer = page_writer_for(conn.dialect)
        return self._page_writer

    # -- reading -------------------------------------------------------------------------

    def quarantined(self, merchant_id: str, limit: int = 20) -> list[QuarantinedRecord]:
        """The newest quarantined items first."""
        query = (
            select(quarantined_records)
            .where(quarantined_records.c.merchant_id == merchant_id)
            .order_by(quarantined_records.c.id.desc())
            .limit(limit)
        )
        with translate_errors("read quarantine"), self._engine.begin() as conn:
            return [
                QuarantinedRecord(
                    id=row.id,
                    merchant_id=row.merchant_id,
                    source=row.source,
                    position=row.position,
                    record_id=row.record_id,
                    reason=row.reason,
                    raw_json=row.raw_json,
                    quarantined_at=row.quarantined_at,
                )
                for row in conn.execute(query)
            ]

    def status(self, merchant_id: str) -> WarehouseStatus:
        windows = snapshot_windows.c
        job_query = (
            select(
                windows.job,
                func.count(),
                func.sum(case((windows.done, 1), else_=0)),
                func.sum(windows.records),
            )
            .where(windows.merchant_id == merchant_id)
            .group_by(windows.job)
            .order_by(windows.job)
        )
        with translate_errors("read status"), self._engine.begin() as conn:
            state = _load_state(conn, merchant_id)
            # MariaDB's SUM() returns DECIMAL: int() makes every backend alike.
            jobs = tuple(
                JobStatus(
                    job=job,
                    windows_total=int(total),
                    windows_done=int(finished or 0),
                    records=int(count or 0),
                )
                for job, total, finished, count in conn.execute(job_query)
            )
            record_count = _count(conn, records.c.merchant_id, merchant_id)
            quarantined = _count(conn, quarantined_records.c.merchant_id, merchant_id)
        return WarehouseStatus(
            merchant_id=merchant_id,
            state=state,
            jobs=jobs,
            records=record_count,
            quarantined=quarantined,
        )

    # -- the BI views (docs/bi.md) -----------------------------------------------------------

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

    def stored_revisions(self, merchant_id: str, record_ids: Collection[str]) -> dict[str, int]:
        """record_id -> revision held in ``records`` for the ids that exist (drift check)."""
        from recordsync.warehouse.lookups import stored_revisions  # noqa: PLC0415 - it imports us

        return stored_revisions(self, merchant_id, record_ids)

    # -- for tests and end-to-end checks -----------------------------------------------------

    def fetch_records(self, merchant_id: str) -> dict[str, dict[str, Any]]:
        """Every stored row of the merchant by record_id (for tests and end-to-end checks)."""
        query = select(records).where(records.c.merchant_id == merchant_id)
        with translate_errors("fetch records"), self._engine.begin() as conn:
            return {row["record_id"]: dict(row) for row in conn.execute(query).mappings()}

    def fetch_revisions(
        self, merchant_id: str, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The stored revision history, ordered by (record_id, revision)."""
        table = record_revisions
        query = select(table).where(table.c.merchant_id == merchant_id)
        if record_id is not None:
            query = query.where(table.c.record_id == record_id)
        query = query.order_by(table.c.record_id, table.c.revision)
        with translate_errors("fetch revisions"), self._engine.begin() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]


# -- helpers shared by the methods above (each runs inside the caller's transaction) -----


def _check_windows(windows: Sequence[Window]) -> None:
    starts = [window.start for window in windows]
    if len(set(starts)) != len(starts):
        raise ValueError("two windows share a start")
    for window in windows:
        if not window.start < window.end:
            raise ValueError(f"empty window [{window.start}, {window.end})")


def _insert_windows(
    conn: Connection, merchant_id: str, job: str, windows: Sequence[Window], now: datetime
) -> None:
    if not windows:
        return
    conn.execute(
        insert(snapshot_windows),
        [
            {
                "merchant_id": merchant_id,
                "job": job,
                "window_start": window.start,
                "window_end": window.end,
                "cursor": None,
                "cursor_issued_at": None,
                "done": False,
                "records": 0,
                "updated_at": now,
            }
            for window in windows
        ],
    )


def _window_update(merchant_id: str, job: str, window: Window) -> Any:
    return update(snapshot_windows).where(
        snapshot_windows.c.merchant_id == merchant_id,
        snapshot_windows.c.job == job,
        snapshot_windows.c.window_start == window.start,
        snapshot_windows.c.window_end == window.end,
    )


def _window_name(merchant_id: str, job: str, window: Window) -> str:
    return f"{job} [{window.start.isoformat()}, {window.end.isoformat()}) of {merchant_id!r}"


def _finish_rebuild_if_complete(conn: Connection, merchant_id: str, now: datetime) -> None:
    conn.execute(
        select(sync_state.c.phase).where(sync_state.c.merchant_id == merchant_id).with_for_update()
    )
    open_windows = conn.execute(
        select(func.count())
        .select_from(snapshot_windows)
        .where(
            snapshot_windows.c.merchant_id == merchant_id,
            snapshot_windows.c.job == REBUILD_JOB,
            snapshot_windows.c.done.is_(False),
        )
    ).scalar_one()
    if open_windows == 0:
        conn.execute(
            update(sync_state)
            .where(sync_state.c.merchant_id == merchant_id)
            .values(phase=Phase.TAILING.value, updated_at=now)
        )


def _count(conn: Connection, merchant_column: Any, merchant_id: str) -> int:
    query = select(func.count()).select_from(merchant_column.table)
    return int(conn.execute(query.where(merchant_column == merchant_id)).scalar_one())


def _load_state(conn: Connection, merchant_id: str) -> SyncState | None:
    row = conn.execute(
        select(sync_state).where(sync_state.c.merchant_id == merchant_id)
    ).one_or_none()
    return None if row is None else _state(row)


def _state(row: Row[Any]) -> SyncState:
    return SyncState(
        merchant_id=row.merchant_id,
        phase=Phase(row.phase),
        change_cursor=row.change_cursor,
        anchor_at=row.anchor_at,
        history_from=row.history_from,
        snapshot_to=row.snapshot_to,
        rebuilds=row.rebuilds,
        last_sequence=row.last_sequence,
        last_projection_as_of=row.last_projection_as_of,
        last_commit_at=row.last_commit_at,
    )


def _load_windows(conn: Connection, merchant_id: str, job: str) -> list[WindowProgress]:
    query = (
        select(snapshot_windows)
        .where(snapshot_windows.c.merchant_id == merchant_id, snapshot_windows.c.job == job)
        .order_by(snapshot_windows.c.window_start)
    )
    return [
        WindowProgress(
            merchant_id=row.merchant_id,
            job=row.job,
            window=Window(start=row.window_start, end=row.window_end),
            cursor=row.cursor,
            cursor_issued_at=row.cursor_issued_at,
            done=bool(row.done),
            records=int(row.records),
        )
        for row in conn.execute(query)
    ]

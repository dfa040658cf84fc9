"""Committing a page: its rows and the cursor that covers them, always together.

Every page commit is ONE transaction: the upserted rows, the revision history (see
``revisions``), the quarantined items and the cursor (a window's or the tail's, see
``sync_state``) commit together or not at all, so after any failure the sync re-reads from a
cursor that covers exactly what is stored (no gap, no orphan cursor).  The ``Warehouse`` opens
that transaction; the functions here run inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import msgspec
from sqlalchemy import Connection, insert, update

from recordsync.core.models import Record, RecordChange, RejectedItem
from recordsync.core.state import Window
from recordsync.warehouse import sync_state
from recordsync.warehouse.page_writer import PageWriter
from recordsync.warehouse.schema import quarantined_records, records
from recordsync.warehouse.staging import stage_page
from recordsync.warehouse.types import money_units
from recordsync.warehouse.upsert import collapse, split_unstorable
from recordsync.warehouse.values import WriteResult

TAIL_SOURCE: Final = "tail"


def commit_window_page(
    conn: Connection,
    writer: PageWriter,
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
    keep_revisions: bool,
    now: datetime,
) -> WriteResult:
    result = _write_rows(
        conn,
        writer,
        merchant_id,
        batch=records,
        rejected=rejected,
        source=job,
        position=position,
        keep_revisions=keep_revisions,
        now=now,
    )
    sync_state.advance_window(
        conn,
        merchant_id,
        job,
        window,
        cursor=next_cursor,
        cursor_issued_at=cursor_issued_at,
        done=done,
        records=result.records,
        now=now,
    )
    return result


def commit_tail_page(
    conn: Connection,
    writer: PageWriter,
    merchant_id: str,
    *,
    records: Sequence[Record],
    rejected: Sequence[RejectedItem],
    next_cursor: str,
    last_sequence: str | None,
    projection_as_of: datetime | None,
    position: str,
    changes: Sequence[RecordChange],
    keep_revisions: bool,
    now: datetime,
) -> WriteResult:
    result = _write_rows(
        conn,
        writer,
        merchant_id,
        batch=records,
        rejected=rejected,
        source=TAIL_SOURCE,
        position=position,
        keep_revisions=keep_revisions,
        now=now,
        changes=changes,
    )
    sync_state.advance_tail(
        conn,
        merchant_id,
        change_cursor=next_cursor,
        last_sequence=last_sequence,
        projection_as_of=projection_as_of,
        now=now,
    )
    return result


def commit_repair(
    conn: Connection,
    writer: PageWriter,
    merchant_id: str,
    *,
    newer: Sequence[Record],
    same_revision: Sequence[Record],
    keep_revisions: bool,
    now: datetime,
) -> None:
    """``recordsync verify --repair``: the platform's records written back, no cursor moved.

    ``newer`` (rows missing or behind) go through the page upsert, under the same guard as
    every page: a stored revision never goes down, so a row the tail moved on meanwhile keeps
    its newer revision.  ``same_revision`` (rows that differ at the platform's revision) are
    rewritten only where the warehouse still holds exactly that revision: the guard of the
    upsert (``<``) leaves an equal revision alone, and a revision is immutable on the platform,
    so the platform's copy is the right one.  Records the columns cannot hold are skipped (the
    sync quarantined them when it read them); ``verify`` reports them as not repaired.
    """
    rows, _unfit = split_unstorable(collapse(newer))
    if rows:
        writer.write(conn, merchant_id, stage_page(rows, (), keep_revisions=keep_revisions), now)
    fitting, _unfit = split_unstorable(collapse(same_revision))
    for record in fitting:
        conn.execute(
            update(records)
            .where(
                records.c.merchant_id == merchant_id,
                records.c.record_id == record.record_id,
                records.c.revision == record.revision,
            )
            .values(
                player_id=record.player_id,
                game_id=record.game_id,
                currency=record.currency,
                round_id=record.round_id,
                parent_round_id=record.parent_round_id,
                bet_amount=record.bet_amount,
                refund_amount=record.refund_amount,
                payout_amount=record.payout_amount,
                net_amount=record.net_amount,
                status=record.status,
                created_at=record.created_at,
                settled_at=record.settled_at,
                updated_at=record.updated_at,
                synced_at=now,
                bet_units=money_units(record.bet_amount),
                refund_units=money_units(record.refund_amount),
                payout_units=money_units(record.payout_amount),
                net_units=money_units(record.net_amount),
            )
        )


def _write_rows(
    conn: Connection,
    writer: PageWriter,
    merchant_id: str,
    *,
    batch: Sequence[Record],
    rejected: Sequence[RejectedItem],
    source: str,
    position: str,
    keep_revisions: bool,
    now: datetime,
    changes: Sequence[RecordChange] = (),
) -> WriteResult:
    """Upsert the storable records (and their history), quarantine the rest."""
    rows, unfit = split_unstorable(collapse(batch))
    where = {"merchant_id": merchant_id, "source": source, "quarantined_at": now}
    quarantine = [{**where, **_rejected_item(position, item)} for item in rejected]
    quarantine.extend(
        {**where, **_unfit_record(position, record, reason)} for record, reason in unfit
    )
    staged = stage_page(rows, changes, keep_revisions=keep_revisions)
    writer.write(conn, merchant_id, staged, now)
    if quarantine:
        conn.execute(insert(quarantined_records), quarantine)
    return WriteResult(records=len(rows), quarantined=len(quarantine))


def _rejected_item(position: str, item: RejectedItem) -> dict[str, Any]:
    """An item the parser refused: kept as the bytes it came as."""
    return {
        "position": f"{position}#{item.position}",
        "record_id": None if item.record_id is None else _safe_text(item.record_id),
        "reason": _safe_text(item.reason),
        "raw_json": item.raw.decode("utf-8", errors="replace"),
    }


def _unfit_record(position: str, record: Record, reason: str) -> dict[str, Any]:
    """A parsed record the columns cannot hold: kept as JSON of what was parsed."""
    return {
        "position": f"{position}#record_id={_safe_text(record.record_id)[:64]}",
        "record_id": _safe_text(record.record_id),
        "reason": reason,
        "raw_json": msgspec.json.encode(record).decode(),
    }


def _safe_text(value: str) -> str:
    """PostgreSQL text cannot hold NUL; a bad item's id or reason may contain one."""
    return value.replace("\x00", "\ufffd")

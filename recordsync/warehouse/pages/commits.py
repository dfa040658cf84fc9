"""Committing a page: its rows and the cursor that covers them, always together.

Every page commit is ONE transaction: the upserted rows, the revision history (see
``revisions``), the quarantined items and the cursor (a window's or the tail's, see
``sync_state``) commit together or not at all, so after any failure the sync re-reads from a
cursor that covers exactly what is stored (no gap, no orphan cursor).  The page store
(``store``) opens that transaction; the functions here run inside it.

What a page writes is worked out before its transaction (``plan_page``), so that its rows can
go to the server first (``PageWriter.send``) and the transaction's shared writes come after
its fence check, with nothing left to wait for from us while the check's lock is held.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import Any, Final

import msgspec
from sqlalchemy import Connection, update

from recordsync.core.extra_fields import unknown_counts
from recordsync.core.models import Record, RecordChange, RejectedItem
from recordsync.core.state import TailPage, WindowPage
from recordsync.warehouse import sync_state
from recordsync.warehouse.fields.promoted import Promoted, fill_page
from recordsync.warehouse.fields.sightings import record_sightings
from recordsync.warehouse.pages.quarantine import item_key, quarantine
from recordsync.warehouse.pages.staging import StagedRevision, stage_page
from recordsync.warehouse.pages.upsert import collapse, split_unstorable
from recordsync.warehouse.pages.writer import PageWriter
from recordsync.warehouse.schema import records
from recordsync.warehouse.types import money_units
from recordsync.warehouse.values import WriteResult

TAIL_SOURCE: Final = "tail"
_EXTRA: Final = attrgetter("extra_fields")
_RECORD_ID: Final = attrgetter("record_id")


@dataclass(frozen=True, slots=True)
class PagePlan:
    """What one page writes: its storable revisions staged, the rest quarantined."""

    staged: list[StagedRevision]
    quarantine: list[dict[str, Any]]
    records: int  # storable records, one per record_id
    # Unknown member name -> (rows that carried it, the first record that did); {} without drift.
    unknown: dict[str, tuple[int, str]] = field(default_factory=dict)
    promoted: tuple[Promoted, ...] = ()  # the promoted fields, whose columns the page fills
    refresh: frozenset[str] = frozenset()  # the unknown names whose last sighting moves now


def plan_page(
    batch: Sequence[Record],
    rejected: Sequence[RejectedItem],
    *,
    merchant_id: str,
    source: str,
    position: str,
    keep_revisions: bool,
    now: datetime,
    changes: Sequence[RecordChange] = (),
    promoted: tuple[Promoted, ...] = (),
    refresh: Callable[[Collection[str]], frozenset[str]] | None = None,
) -> PagePlan:
    """The storable records (and their history) staged, the rest quarantined; pure.
    ``refresh``: which of the page's unknown names should move their last sighting."""
    rows, unfit = split_unstorable(collapse(batch))
    where = {"merchant_id": merchant_id, "source": source, "quarantined_at": now}
    items = [_rejected_item(position, item) for item in rejected]
    items.extend(_unfit_record(position, record, reason) for record, reason in unfit)
    quarantined = [
        {**where, **item, "item_key": item_key(item["record_id"], item["raw_json"])}
        for item in items
    ]
    staged = stage_page(rows, changes, keep_revisions=keep_revisions)
    extras = list(map(_EXTRA, rows))
    unknown = {}
    if extras.count(None) != len(extras):  # the page carried unknown members
        unknown = unknown_counts(extras, map(_RECORD_ID, rows))
    due = refresh(unknown.keys()) if unknown and refresh is not None else frozenset(unknown)
    return PagePlan(staged, quarantined, len(rows), unknown, promoted, due)


def commit_window_page(
    conn: Connection,
    writer: PageWriter,
    merchant_id: str,
    plan: PagePlan,
    page: WindowPage,
    *,
    now: datetime,
    sent: bool = False,
) -> WriteResult:
    """``plan`` (``page``'s rows) stored (``sent``: they went to the server before) and the
    window's cursor moved."""
    result = _write_plan(conn, writer, merchant_id, plan, now, sent=sent)
    sync_state.advance_window(
        conn,
        merchant_id,
        page.job,
        page.window,
        cursor=page.next_cursor,
        cursor_issued_at=page.cursor_issued_at,
        done=page.done,
        records=result.records,
        now=now,
    )
    return result


def commit_tail_page(
    conn: Connection,
    writer: PageWriter,
    merchant_id: str,
    plan: PagePlan,
    page: TailPage,
    *,
    now: datetime,
    sent: bool = False,
) -> WriteResult:
    """``plan`` (``page``'s rows) stored (``sent``: they went to the server before) and the
    change cursor moved."""
    result = _write_plan(conn, writer, merchant_id, plan, now, sent=sent)
    sync_state.advance_tail(
        conn,
        merchant_id,
        change_cursor=page.next_cursor,
        last_sequence=page.last_sequence,
        projection_as_of=page.projection_as_of,
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
                extra_fields=record.extra_fields,
            )
        )


def _write_plan(
    conn: Connection,
    writer: PageWriter,
    merchant_id: str,
    plan: PagePlan,
    now: datetime,
    *,
    sent: bool,
) -> WriteResult:
    """Upsert the storable records (and their history), quarantine the rest."""
    if sent:
        writer.merge(conn, merchant_id, plan.staged, now)
    else:
        writer.write(conn, merchant_id, plan.staged, now)
    quarantine(conn, plan.quarantine)
    if plan.unknown:
        record_sightings(conn, merchant_id, plan.unknown, plan.refresh)
    if plan.promoted and plan.staged:
        fill_page(conn, merchant_id, plan.staged, plan.promoted)
    return WriteResult(records=plan.records, quarantined=len(plan.quarantine))


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

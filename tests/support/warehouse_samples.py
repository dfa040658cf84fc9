"""Sample records and windows for the warehouse tests, and the rebuild they are written under."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from msgspec.structs import replace

from recordsync.core.models import Record, RecordChange
from recordsync.core.state import REBUILD_JOB, TailPage, Window
from recordsync.warehouse import Warehouse
from support.pages import commit_window_page

MERCHANT = "merchant-1"
T0 = datetime(2024, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
WINDOW = Window(T0 - DAY, T0)  # the one window of ``start_rebuild_of_window``


def make_record(record_id: str = "rec-1", revision: int = 1, **changes: Any) -> Record:
    record = Record(
        record_id=record_id,
        revision=revision,
        player_id="player-1",
        game_id="game-1",
        currency="USD",
        round_id=f"round-{record_id[:40]}",
        parent_round_id=None,
        bet_amount=Decimal("10.00"),
        refund_amount=Decimal(0),
        payout_amount=Decimal(0),
        net_amount=Decimal("-10.00"),
        status="OPEN",
        created_at=T0 + timedelta(minutes=1),
        settled_at=None,
        updated_at=T0 + timedelta(minutes=1, seconds=revision % 1000),
    )
    return replace(record, **changes)


def make_change(record: Record, sequence: int) -> RecordChange:
    """The change that brought ``record``, 5 ms after its update."""
    return RecordChange(
        sequence=str(sequence),
        record_id=record.record_id,
        revision=record.revision,
        changed_at=record.updated_at + timedelta(milliseconds=5),
        record=record,
    )


def windows(count: int, start: datetime = T0 - 3 * DAY) -> list[Window]:
    """``count`` consecutive one-day windows from ``start``."""
    return [Window(start + i * DAY, start + (i + 1) * DAY) for i in range(count)]


def stored_view(record: Record) -> dict[str, Any]:
    """The columns a stored row must hold for ``record`` (everything but the bookkeeping)."""
    return {
        "record_id": record.record_id,
        "revision": record.revision,
        "player_id": record.player_id,
        "game_id": record.game_id,
        "currency": record.currency,
        "round_id": record.round_id,
        "parent_round_id": record.parent_round_id,
        "bet_amount": record.bet_amount,
        "refund_amount": record.refund_amount,
        "payout_amount": record.payout_amount,
        "net_amount": record.net_amount,
        "status": record.status,
        "created_at": record.created_at,
        "settled_at": record.settled_at,
        "updated_at": record.updated_at,
    }


def row_view(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in stored_view(make_record())}


def start_rebuild_of_window(
    store: Warehouse,
    plan: Sequence[Window] = (WINDOW,),
    *,
    defer_bi_indexes: bool = False,
    merchant_id: str = MERCHANT,
) -> Warehouse:
    """``store`` with a rebuild of ``merchant_id`` anchored at ``T0`` over ``plan`` (the one
    ``WINDOW`` unless told)."""
    store.state.start_rebuild(
        merchant_id,
        change_cursor="change-cursor-0",
        anchor_at=T0,
        history_from=plan[0].start,
        snapshot_to=plan[-1].end,
        windows=plan,
        defer_bi_indexes=defer_bi_indexes,
    )
    return store


def snapshot_page(store: Warehouse, *records: Record, merchant_id: str = MERCHANT) -> None:
    """``records`` committed as a page of the rebuild's one window (WINDOW)."""
    commit_window_page(
        store,
        merchant_id,
        REBUILD_JOB,
        WINDOW,
        records=list(records),
        rejected=[],
        next_cursor="w-1",
        cursor_issued_at=T0,
        done=False,
        position="start",
    )


def tail_page(store: Warehouse, *changes: RecordChange, with_changes: bool = True) -> None:
    """``changes`` committed as a tail page (their records, and their history unless not)."""
    store.pages.commit_tail_page(
        MERCHANT,
        TailPage(
            records=[item.record for item in changes],
            rejected=[],
            next_cursor="tail-next",
            last_sequence=max((item.sequence for item in changes), key=int, default=None),
            projection_as_of=T0,
            position="tail-0",
            changes=list(changes) if with_changes else (),
        ),
    )

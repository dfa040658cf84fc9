"""Reading the BI views that Alembic revision 0003 creates (docs/bi.md describes them).

The views are defined in SQL by the migration; here they are described as tables only so that
reads get the same exact Python types as the tables give: ``Decimal`` money (SQLite's views
print their exact sums as text), aware UTC datetimes, and ``date`` days (SQLite: text).  They
live in their own ``MetaData`` so that schema comparisons never mistake them for tables.
"""

from __future__ import annotations

from datetime import date
from typing import Any, Final

from sqlalchemy import BigInteger, Column, Connection, MetaData, String, Table, func, select

from recordsync.core.state import Phase
from recordsync.warehouse.schema import CODE_LENGTH, ID_LENGTH, PHASE_LENGTH, records
from recordsync.warehouse.types import exact_decimal, utc_datetime, utc_day
from recordsync.warehouse.values import DailySummary, Freshness

view_metadata = MetaData()

COUNTS: Final = ("rounds", "rounds_open", "rounds_settled", "rounds_void")
SUMS: Final = ("bet_amount", "payout_amount", "refund_amount", "net_amount", "ggr_amount")


def _summary_view(name: str, subject: str) -> Table:
    return Table(
        name,
        view_metadata,
        Column("merchant_id", String(ID_LENGTH)),
        Column("day", utc_day()),
        Column(subject, String(ID_LENGTH)),
        Column("currency", String(CODE_LENGTH)),
        *(Column(count, BigInteger) for count in COUNTS),
        *(Column(amount, exact_decimal()) for amount in SUMS),
    )


daily_game_summary = _summary_view("daily_game_summary", "game_id")
daily_player_summary = _summary_view("daily_player_summary", "player_id")
SUMMARY_VIEWS: Final = {
    "game": (daily_game_summary, "game_id"),
    "player": (daily_player_summary, "player_id"),
}

sync_freshness = Table(
    "sync_freshness",
    view_metadata,
    Column("merchant_id", String(ID_LENGTH)),
    Column("phase", String(PHASE_LENGTH)),
    Column("anchor_at", utc_datetime()),
    Column("last_projection_as_of", utc_datetime()),
    Column("last_commit_at", utc_datetime()),
    Column("staleness_seconds", BigInteger),
    Column("seconds_since_commit", BigInteger),
)


def newest_record_day(conn: Connection, merchant_id: str) -> date | None:
    """The UTC day of the merchant's newest ``created_at`` (an index lookup), or None."""
    newest = conn.execute(
        select(func.max(records.c.created_at)).where(records.c.merchant_id == merchant_id)
    ).scalar_one_or_none()
    return None if newest is None else newest.date()


def daily_summaries(
    conn: Connection, merchant_id: str, *, per: str, first_day: date, last_day: date
) -> list[DailySummary]:
    """Rows of the ``per`` ("game" or "player") view for the days, ordered by day, id, currency."""
    if per not in SUMMARY_VIEWS:
        raise ValueError(f"no daily summary per {per!r}: use one of {sorted(SUMMARY_VIEWS)}")
    view, subject = SUMMARY_VIEWS[per]
    query = (
        select(view)
        .where(
            view.c.merchant_id == merchant_id,
            view.c.day >= first_day,
            view.c.day <= last_day,
        )
        .order_by(view.c.day, view.c[subject], view.c.currency)
    )
    return [_summary(row, subject) for row in conn.execute(query).mappings()]


def _summary(row: Any, subject: str) -> DailySummary:
    return DailySummary(
        day=row["day"],
        merchant_id=row["merchant_id"],
        subject=row[subject],
        currency=row["currency"],
        # MariaDB hands some integer aggregates back as Decimal; int() makes them alike.
        rounds=int(row["rounds"]),
        rounds_open=int(row["rounds_open"]),
        rounds_settled=int(row["rounds_settled"]),
        rounds_void=int(row["rounds_void"]),
        bet_amount=row["bet_amount"],
        payout_amount=row["payout_amount"],
        refund_amount=row["refund_amount"],
        net_amount=row["net_amount"],
        ggr_amount=row["ggr_amount"],
    )


def freshness(conn: Connection, merchant_id: str) -> Freshness | None:
    row = (
        conn.execute(select(sync_freshness).where(sync_freshness.c.merchant_id == merchant_id))
        .mappings()
        .one_or_none()
    )
    if row is None:
        return None
    return Freshness(
        merchant_id=row["merchant_id"],
        phase=Phase(row["phase"]),
        anchor_at=row["anchor_at"],
        last_projection_as_of=row["last_projection_as_of"],
        last_commit_at=row["last_commit_at"],
        staleness_seconds=_optional_int(row["staleness_seconds"]),
        seconds_since_commit=_optional_int(row["seconds_since_commit"]),
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)

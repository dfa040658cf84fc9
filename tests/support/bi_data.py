"""The data the BI tests load into every backend, and the sums they expect, in plain Python.

- The simulator's history (a fixed clock, so the same rounds every run), stored the way the
  sync stores it: the truth through snapshot pages, then the whole change stream through tail
  pages with their changes (so ``record_revisions`` holds every revision with its sequence).
- Edge records: amounts at the per-transaction maximum, 1500 of them in one group (a sum
  beyond 64-bit units), negative nets, VOID with refunds, OPEN rounds, an unknown status,
  ``-0.00``, and rounds on both sides of a UTC midnight.
- MERCHANT's game catalogue, as two catalogue passes store it, the second without the last
  game (it left the catalogue: its row stays, unlisted); the edge games are not in it (a
  game the catalogue never listed keeps its rows, unnamed).
- A merchant with old data only (reports count back from the newest data day, not the clock)
  and one with an amount beyond +-922337203685477.5807 (SQLite cannot sum it exactly).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal, Inexact, localcontext
from functools import cache
from typing import Any

import orjson
from msgspec.structs import replace

from recordsync.core.models import Game, Record, RecordChange
from recordsync.core.state import REBUILD_JOB, TailPage, Window
from recordsync.platform.parsing import parse_change, parse_game, parse_record
from recordsync.sim import Simulator
from recordsync.sim.config import SimConfig
from recordsync.warehouse import Warehouse
from support.pages import commit_window_page

# The tail's last projection_as_of, two minutes before the test run: sync_freshness then
# reports about 120 s of staleness by the database's clock.
STALENESS = timedelta(minutes=2)

MERCHANT = "demo-merchant"
OLD_MERCHANT = "old-merchant"
HUGE_MERCHANT = "huge-merchant"
SIM_NOW = datetime(2024, 3, 10, 12, tzinfo=UTC)
MIDNIGHT = datetime(2024, 3, 9, tzinfo=UTC)
OLD_DAY = datetime(2021, 6, 1, 8, tzinfo=UTC)
MAX = Decimal("999999999999.9999")
PAGE = 1000
AMOUNTS = ("bet_amount", "payout_amount", "refund_amount", "net_amount", "ggr_amount")
COUNTS = ("rounds", "rounds_open", "rounds_settled", "rounds_void")
_EXACT = Context(prec=100, traps=[Inexact])


@dataclass(frozen=True)
class Dataset:
    records: dict[str, list[Record]]  # merchant -> its records at their newest revision
    changes: list[RecordChange]  # MERCHANT's change stream, in order
    projection_as_of: datetime
    games: list[Game]  # MERCHANT's game catalogue (the edge records' games are not in it)


def _round(record_id: str, **fields: Any) -> Record:
    base = Record(
        record_id=record_id,
        revision=1,
        player_id="edge-player",
        game_id="edge-game",
        currency="USDT",
        round_id=f"round-{record_id}",
        parent_round_id=None,
        bet_amount=Decimal("1.00"),
        refund_amount=Decimal(0),
        payout_amount=Decimal(0),
        net_amount=Decimal("-1.00"),
        status="SETTLED",
        created_at=MIDNIGHT + timedelta(hours=3),
        settled_at=MIDNIGHT + timedelta(hours=3, seconds=5),
        updated_at=MIDNIGHT + timedelta(hours=3, seconds=5),
    )
    return replace(base, **fields)


def edge_records() -> list[Record]:
    """Hand-made rounds at the limits; amounts obey net = payout + refund - bet."""
    edges = [
        _round(
            f"edge-max-{i:04d}",
            player_id=f"whale-{i % 7}",
            bet_amount=MAX,
            payout_amount=Decimal("0.0001") * (i % 3),
            net_amount=Decimal("0.0001") * (i % 3) - MAX,
        )
        for i in range(1500)
    ]
    edges += [
        _round(  # a max win: a large negative GGR for the operator
            "edge-win",
            game_id="edge-game-2",
            bet_amount=Decimal("0.01"),
            payout_amount=MAX * 2,
            net_amount=MAX * 2 - Decimal("0.01"),
        ),
        _round(  # VOID: fully refunded, no settlement
            "edge-void",
            game_id="edge-game-2",
            bet_amount=Decimal("25.5"),
            refund_amount=Decimal("25.5"),
            net_amount=Decimal("0.0"),
            status="VOID",
            settled_at=None,
        ),
        _round(  # a partial refund of a settled round
            "edge-refund",
            game_id="edge-game-2",
            bet_amount=Decimal(10),
            refund_amount=Decimal("2.5"),
            payout_amount=Decimal(0),
            net_amount=Decimal("-7.5"),
        ),
        _round(  # OPEN: not final
            "edge-open",
            game_id="edge-game-2",
            bet_amount=Decimal("3.3333"),
            net_amount=Decimal("-3.3333"),
            status="OPEN",
            settled_at=None,
        ),
        _round(  # a status this version does not know: counted in rounds only
            "edge-unknown",
            game_id="edge-game-2",
            status="PARTIALLY_REFUNDED",
        ),
        _round(
            "edge-zero",
            game_id="edge-game-2",
            bet_amount=Decimal("-0.00"),
            net_amount=Decimal("-0.00"),
        ),
        # Both sides of UTC midnight: different days.
        _round("edge-before-midnight", created_at=MIDNIGHT - timedelta(milliseconds=1)),
        _round("edge-at-midnight", created_at=MIDNIGHT),
        # Same player, other currency and game.
        _round(
            "edge-jpy",
            currency="JPY",
            game_id="edge-game-2",
            bet_amount=Decimal(700),
            payout_amount=Decimal(1400),
            net_amount=Decimal(700),
        ),
    ]
    return edges


@cache
def dataset() -> Dataset:
    sim = Simulator(SimConfig(seed=7, history_days=3, rounds_per_day=300), clock=SIM_NOW.timestamp)
    truth = [parse_record(raw) for raw in sim.store.truth().values()]
    stream = sim.store.changes(0, sim.store.change_count)
    changes = [parse_change(orjson.loads(item)) for item in stream.items]
    old = [
        _round(f"old-{i}", player_id=f"old-player-{i % 2}", created_at=OLD_DAY + timedelta(hours=i))
        for i in range(5)
    ]
    huge = [
        _round("huge-1", bet_amount=Decimal(10**20), net_amount=Decimal(-(10**20))),
        _round("huge-2", bet_amount=Decimal("0.5"), net_amount=Decimal("-0.5")),
        _round("huge-3", game_id="fine-game", bet_amount=Decimal(2), net_amount=Decimal(-2)),
    ]
    return Dataset(
        records={MERCHANT: truth + edge_records(), OLD_MERCHANT: old, HUGE_MERCHANT: huge},
        changes=changes,
        projection_as_of=SIM_NOW,
        games=[parse_game(game.wire()) for game in sim.games().listed()],
    )


def _pages(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), PAGE):
        yield items[start : start + PAGE]


def load(warehouse: Warehouse, data: Dataset, *, projection_as_of: datetime) -> None:
    """Store the dataset as the sync would: snapshot pages, then the change stream."""
    for merchant, records in data.records.items():
        span = Window(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
        warehouse.state.start_rebuild(
            merchant,
            change_cursor="anchor",
            anchor_at=data.projection_as_of,
            history_from=span.start,
            snapshot_to=span.end,
            windows=[span],
        )
        pages = list(_pages(records))
        for number, page in enumerate(pages):
            done = number == len(pages) - 1
            commit_window_page(
                warehouse,
                merchant,
                REBUILD_JOB,
                span,
                records=page,
                rejected=[],
                next_cursor=None if done else f"page-{number + 1}",
                cursor_issued_at=data.projection_as_of,
                done=done,
                position=f"page-{number}",
            )
    warehouse.games.commit_catalogue(MERCHANT, data.games)
    # A second pass without the last game: it left the catalogue, its row kept unlisted.
    warehouse.games.commit_catalogue(MERCHANT, data.games[:-1])
    for number, page in enumerate(_pages(data.changes)):
        warehouse.pages.commit_tail_page(
            MERCHANT,
            TailPage(
                records=[change.record for change in page],
                rejected=[],
                next_cursor=f"tail-{number + 1}",
                last_sequence=page[-1].sequence,
                projection_as_of=projection_as_of,
                position=f"tail-{number}",
                changes=page,
            ),
        )


# -- what the views must say, computed in Python with Decimal -------------------------------


def expected_summary(records: Iterable[Record], merchant: str, subject: str) -> dict[tuple, dict]:
    """(merchant, day, subject, currency) -> the view's columns, amounts as exact Decimals."""
    groups: dict[tuple, list[Record]] = defaultdict(list)
    for record in records:
        day = record.created_at.astimezone(UTC).date()
        groups[(merchant, day, getattr(record, subject), record.currency)].append(record)
    with localcontext(_EXACT):
        return {key: sums_of(members) for key, members in groups.items()}


def sums_of(members: list[Record]) -> dict[str, Any]:
    bet = sum((r.bet_amount for r in members), Decimal(0))
    payout = sum((r.payout_amount for r in members), Decimal(0))
    refund = sum((r.refund_amount for r in members), Decimal(0))
    return {
        "rounds": len(members),
        "rounds_open": sum(r.status == "OPEN" for r in members),
        "rounds_settled": sum(r.status == "SETTLED" for r in members),
        "rounds_void": sum(r.status == "VOID" for r in members),
        "bet_amount": bet,
        "payout_amount": payout,
        "refund_amount": refund,
        "net_amount": sum((r.net_amount for r in members), Decimal(0)),
        "ggr_amount": bet - payout - refund,
    }


def exact_text(value: Decimal) -> str:
    """How every backend prints a sum: 4 fraction digits, no exponent."""
    return f"{value:.4f}"


def days_of(records: Iterable[Record]) -> list[date]:
    return sorted({record.created_at.astimezone(UTC).date() for record in records})


def expected_report(
    records: Iterable[Record], *, by: str, days: int
) -> tuple[date, date, dict[tuple[str | None, str], dict[str, Any]]]:
    """(first day, last day, (subject, currency) -> sums) of a report of the last ``days``."""
    records = list(records)
    last = days_of(records)[-1]
    first = last - timedelta(days=days - 1)
    groups: dict[tuple[str | None, str], list[Record]] = defaultdict(list)
    for record in records:
        if first <= record.created_at.astimezone(UTC).date() <= last:
            subject = None if by == "currency" else getattr(record, f"{by}_id")
            groups[(subject, record.currency)].append(record)
    with localcontext(_EXACT):
        return first, last, {key: sums_of(members) for key, members in groups.items()}

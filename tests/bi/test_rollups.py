"""The daily summaries stay equal to a fresh aggregation of ``records`` at every moment,
whatever writes the rows and whenever the holder folds and builds (``warehouse.bi.rollups``).

Each hypothesis example is a merchant of its own in one migrated warehouse per backend: pages
through the real writer (snapshot and tail pages, revisions in any order, duplicates, stale
replays), ``verify --repair`` writes, rows deleted and moved by plain SQL, folds of random
sizes and builds of the days that predate the triggers, each step checked against the rows.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from sqlalchemy import text
from support.pages import commit_window_page
from support.summarycheck import summary_differences
from support.warehouse_samples import make_record

from recordsync.core.state import REBUILD_JOB, TailPage, Window
from recordsync.warehouse import Warehouse

MIDNIGHT = datetime(2024, 3, 9, tzinfo=UTC)
SPAN = Window(MIDNIGHT - timedelta(days=3), MIDNIGHT + timedelta(days=3))
MAX = Decimal("999999999999.9999")
_merchants = itertools.count()

amounts = st.sampled_from(
    [Decimal(0), Decimal("10.00"), Decimal("0.0001"), Decimal("-0.00"), Decimal("77.5"), MAX]
)
records = st.builds(
    lambda number, revision, minutes, game, player, currency, status, bet, payout, refund: (
        make_record(
            f"rec-{number}",
            revision,
            created_at=MIDNIGHT + timedelta(minutes=minutes),
            game_id=f"game-{game}",
            player_id=f"player-{player}",
            currency=currency,
            status=status,
            bet_amount=bet,
            payout_amount=payout,
            refund_amount=refund,
            net_amount=payout + refund - bet,
        )
    ),
    number=st.integers(0, 5),
    revision=st.integers(1, 6),
    # Either side of a UTC midnight, and a day further.
    minutes=st.sampled_from([-1441, -1, 0, 1, 1439, 1440]),
    game=st.integers(0, 1),
    player=st.integers(0, 1),
    currency=st.sampled_from(["USD", "EUR"]),
    status=st.sampled_from(["OPEN", "SETTLED", "VOID", "ODD"]),
    bet=amounts,
    payout=amounts,
    refund=amounts,
)
steps = st.one_of(
    st.tuples(st.just("snapshot"), st.lists(records, min_size=1, max_size=4)),
    st.tuples(st.just("tail"), st.lists(records, min_size=1, max_size=4)),
    st.tuples(st.just("repair"), st.lists(records, min_size=1, max_size=2)),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("move"), st.integers(0, 5)),
    st.tuples(st.just("fold"), st.integers(1, 7)),
    st.tuples(st.just("build"), st.none()),
)


def _start(warehouse: Warehouse, merchant: str) -> None:
    warehouse.state.start_rebuild(
        merchant,
        change_cursor="anchor",
        anchor_at=MIDNIGHT,
        history_from=SPAN.start,
        snapshot_to=SPAN.end,
        windows=[SPAN],
    )


def _apply(warehouse: Warehouse, merchant: str, step: tuple, number: int) -> None:
    kind, value = step
    if kind == "snapshot":
        commit_window_page(
            warehouse,
            merchant,
            REBUILD_JOB,
            SPAN,
            records=value,
            rejected=[],
            next_cursor=f"page-{number}",
            cursor_issued_at=MIDNIGHT,
            done=False,
            position=f"page-{number}",
        )
    elif kind == "tail":
        warehouse.pages.commit_tail_page(
            merchant,
            TailPage(
                records=value,
                rejected=[],
                next_cursor=f"tail-{number}",
                last_sequence=str(number),
                projection_as_of=MIDNIGHT,
                position=f"tail-{number}",
            ),
        )
    elif kind == "repair":
        stored = warehouse.records.stored_records(merchant, [item.record_id for item in value])
        same = [
            item
            for item in value
            if item.record_id in stored and stored[item.record_id].revision == item.revision
        ]
        newer = [item for item in value if item not in same]
        warehouse.pages.repair_records(merchant, newer=newer, same_revision=same)
    elif kind in {"delete", "move"}:
        _by_sql(warehouse, merchant, kind, f"rec-{value}")
    elif kind == "fold":
        warehouse.summaries.fold(merchant, batch=value)
    else:
        warehouse.summaries.build_next_day(merchant)


def _by_sql(warehouse: Warehouse, merchant: str, kind: str, record_id: str) -> None:
    """What an operator's SQL does: a row deleted, or moved to another game and day."""
    key = {"m": merchant, "r": record_id}
    stored = warehouse.records.stored_records(merchant, [record_id]).get(record_id)
    with warehouse.engine.begin() as conn:
        if kind == "delete":
            conn.execute(text("DELETE FROM records WHERE merchant_id = :m AND record_id = :r"), key)
            return
        if stored is None:
            return
        later = stored.created_at + timedelta(days=1)
        conn.execute(
            text(
                "UPDATE records SET game_id = 'game-moved', created_at = :at "
                "WHERE merchant_id = :m AND record_id = :r"
            ),
            {**key, "at": _time_value(warehouse, later)},
        )


def _time_value(warehouse: Warehouse, value: datetime) -> object:
    dialect = warehouse.engine.dialect.name
    if dialect == "sqlite":
        return value.isoformat(timespec="microseconds")
    return value.replace(tzinfo=None) if dialect in {"mysql", "mariadb"} else value


def _forget_summaries(warehouse: Warehouse, merchant: str, days: list[date]) -> None:
    """The state revision 0015 leaves on a warehouse with rows: the rows' contributions in no
    total and no delta, their days to build."""
    if not days:
        return
    dialect = warehouse.engine.dialect.name
    value = (lambda day: day.isoformat()) if dialect == "sqlite" else (lambda day: day)
    with warehouse.engine.begin() as conn:
        for table in ("summary_deltas", "daily_game_totals", "daily_player_totals"):
            conn.execute(text(f"DELETE FROM {table} WHERE merchant_id = :m"), {"m": merchant})
        conn.execute(
            text(
                "INSERT INTO summary_builds (merchant_id, first_day, next_day, last_day) "
                "VALUES (:m, :first, :first, :last)"
            ),
            {"m": merchant, "first": value(min(days)), "last": value(max(days))},
        )


def _check(warehouse: Warehouse, merchant: str, after: str) -> None:
    problems = summary_differences(warehouse, merchant)
    assert not problems, f"after {after}: {problems[:5]}"


@settings(
    max_examples=12,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(before=st.lists(records, max_size=6), script=st.lists(steps, min_size=1, max_size=10))
def test_summaries_equal_a_fresh_aggregation_after_every_step(warehouse, before, script):
    merchant = f"m-{next(_merchants)}"
    _start(warehouse, merchant)
    # Rows older than the triggers (a warehouse upgraded to revision 0015), to build.
    if before:
        _apply(warehouse, merchant, ("snapshot", before), 0)
        rows = warehouse.records.fetch_records(merchant).values()
        days = [row["created_at"].astimezone(UTC).date() for row in rows]
        _forget_summaries(warehouse, merchant, days)
    _check(warehouse, merchant, "the upgrade")
    for number, step in enumerate(script, start=1):
        _apply(warehouse, merchant, step, number)
        _check(warehouse, merchant, f"step {number} {step[0]}")
    # The holder catches up: every delta folded, every old day built; still exact.
    while warehouse.summaries.build_next_day(merchant) is not None:
        pass
    while warehouse.summaries.fold(merchant, batch=3):
        pass
    _check(warehouse, merchant, "the holder caught up")
    assert warehouse.summaries.build_progress(merchant) == []
    with warehouse.engine.connect() as conn:
        left = conn.execute(
            text("SELECT COUNT(*) FROM summary_deltas WHERE merchant_id = :m"), {"m": merchant}
        ).scalar_one()
    assert left == 0


@pytest.mark.parametrize("batch", [1, 1000], ids=["one-delta", "all"])
def test_a_fold_moves_deltas_into_totals_and_the_views_do_not_change(warehouse, batch):
    merchant = f"m-fold-{batch}"
    _start(warehouse, merchant)
    page = [make_record(f"r{i}", 1, game_id=f"game-{i % 2}") for i in range(4)]
    _apply(warehouse, merchant, ("snapshot", page), 0)
    settled = [replace(record, revision=2, status="SETTLED") for record in page]
    _apply(warehouse, merchant, ("tail", settled), 1)
    before = _view(warehouse, merchant)
    folded = warehouse.summaries.fold(merchant, batch=batch)
    assert folded == min(batch, _deltas(warehouse, merchant) + folded)
    assert _view(warehouse, merchant) == before
    _check(warehouse, merchant, "the fold")


def _deltas(warehouse: Warehouse, merchant: str) -> int:
    with warehouse.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT COUNT(*) FROM summary_deltas WHERE merchant_id = :m"), {"m": merchant}
            ).scalar_one()
        )


def _view(warehouse: Warehouse, merchant: str) -> list[tuple]:
    with warehouse.engine.connect() as conn:
        return [
            tuple(row)
            for row in conn.execute(
                text(
                    "SELECT * FROM daily_game_summary WHERE merchant_id = :m "
                    "ORDER BY day, game_id, currency"
                ),
                {"m": merchant},
            )
        ]

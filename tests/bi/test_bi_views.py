"""The BI views equal sums computed in Python with Decimal, to the last digit, on every backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import text
from support.bi_data import (
    AMOUNTS,
    COUNTS,
    HUGE_MERCHANT,
    MERCHANT,
    MIDNIGHT,
    STALENESS,
    dataset,
    exact_text,
    expected_summary,
)
from support.warehouse_reads import fetch_revisions

from recordsync.core.state import Phase
from recordsync.warehouse import Warehouse

SUMMARIES = [("daily_game_summary", "game_id"), ("daily_player_summary", "player_id")]
COLUMNS = ["merchant_id", "day", "{subject}", "currency", *COUNTS, *AMOUNTS]


def raw_rows(store: Warehouse, view: str, merchant: str) -> tuple[list[str], list[tuple]]:
    """The view through plain SQL, as a BI tool sees it: no recordsync types involved."""
    with store.engine.connect() as conn:
        result = conn.execute(text(f"SELECT * FROM {view} WHERE merchant_id = :m"), {"m": merchant})
        return list(result.keys()), [tuple(row) for row in result]


@pytest.mark.parametrize(("view", "subject"), SUMMARIES, ids=["game", "player"])
def test_summary_views_equal_python_decimal_sums_to_the_last_digit(loaded, view, subject):
    records = dataset().records[MERCHANT]
    expected = expected_summary(records, MERCHANT, subject)
    columns, rows = raw_rows(loaded, view, MERCHANT)
    assert columns == [name.format(subject=subject) for name in COLUMNS]
    seen = {}
    for row in rows:
        values = dict(zip(columns, row, strict=True))
        key = (values["merchant_id"], str(values["day"]), values[subject], values["currency"])
        seen[key] = {
            **{name: int(values[name]) for name in COUNTS},
            # str() of what the driver returns: exact text on SQLite, Decimal elsewhere.
            **{name: str(values[name]) for name in AMOUNTS},
        }
    want = {
        (merchant, day.isoformat(), who, currency): {
            **{name: sums[name] for name in COUNTS},
            **{name: exact_text(sums[name]) for name in AMOUNTS},
        }
        for (merchant, day, who, currency), sums in expected.items()
    }
    assert seen == want


def test_the_dataset_reaches_the_limits_it_is_meant_to(loaded):
    """Guards the test above: a 64-bit overflow of units, negative nets, every status."""
    expected = expected_summary(dataset().records[MERCHANT], MERCHANT, "game_id")
    big = expected[(MERCHANT, MIDNIGHT.date(), "edge-game", "USDT")]
    assert big["bet_amount"] * 10_000 > 2**63
    assert any(sums["net_amount"] < 0 for sums in expected.values())
    assert any(sums["ggr_amount"] < 0 for sums in expected.values())
    for count in ("rounds_open", "rounds_void"):
        assert sum(sums[count] for sums in expected.values()) > 0
    assert len({day for _, day, _, _ in expected}) >= 4


def test_a_round_one_millisecond_before_midnight_counts_on_the_earlier_day(loaded):
    before, after = MIDNIGHT.date() - timedelta(days=1), MIDNIGHT.date()
    rows = loaded.bi.daily_summaries(MERCHANT, per="player", first_day=before, last_day=after)
    edge = {(row.day, row.currency): row for row in rows if row.subject == "edge-player"}
    assert edge[before, "USDT"].rounds == 1
    assert edge[after, "USDT"].rounds == 1 + 6  # the one at midnight, the six of edge-game-2


@pytest.mark.parametrize("per", ["game", "player"])
def test_the_typed_reader_gives_the_same_exact_decimals(loaded, per):
    subject = f"{per}_id"
    expected = expected_summary(dataset().records[MERCHANT], MERCHANT, subject)
    days = sorted({day for _, day, _, _ in expected})
    rows = loaded.bi.daily_summaries(MERCHANT, per=per, first_day=days[0], last_day=days[-1])
    got = {
        (row.merchant_id, row.day, row.subject, row.currency): {
            name: getattr(row, name) for name in (*COUNTS, *AMOUNTS)
        }
        for row in rows
    }
    assert got == expected
    assert [row.day for row in rows] == sorted(row.day for row in rows)


def test_an_amount_beyond_64_bit_units_is_exact_on_servers_and_null_on_sqlite(loaded):
    expected = expected_summary(dataset().records[HUGE_MERCHANT], HUGE_MERCHANT, "game_id")
    day = MIDNIGHT.date()
    rows = {
        row.subject: row
        for row in loaded.bi.daily_summaries(HUGE_MERCHANT, per="game", first_day=day, last_day=day)
    }
    huge, fine = rows["edge-game"], rows["fine-game"]
    want = expected[(HUGE_MERCHANT, day, "edge-game", "USDT")]
    if loaded.engine.dialect.name == "sqlite":
        # Unknown, never inexact: only the sums that include the huge amount are NULL.
        assert (huge.bet_amount, huge.net_amount, huge.ggr_amount) == (None, None, None)
        assert huge.payout_amount == want["payout_amount"]
    else:
        assert huge.bet_amount == want["bet_amount"] == Decimal("100000000000000000000.5")
        assert huge.ggr_amount == want["ggr_amount"]
    assert fine.bet_amount == 2


def test_sync_freshness_reports_phase_as_of_and_staleness_by_the_database_clock(loaded):
    fresh = loaded.bi.freshness(MERCHANT)
    assert fresh is not None
    assert fresh.phase is Phase.TAILING
    assert fresh.last_projection_as_of is not None
    assert fresh.staleness_seconds is not None
    assert fresh.seconds_since_commit is not None
    # Loaded at most a few minutes ago with projection_as_of two minutes before that.
    assert STALENESS.total_seconds() - 1 <= fresh.staleness_seconds <= 600
    assert 0 <= fresh.seconds_since_commit <= 480
    age = datetime.now(UTC) - fresh.last_projection_as_of
    assert abs(age.total_seconds() - fresh.staleness_seconds) <= 5


def test_a_merchant_never_tailed_has_no_staleness_yet(loaded):
    fresh = loaded.bi.freshness(HUGE_MERCHANT)
    assert fresh is not None
    assert (fresh.last_projection_as_of, fresh.staleness_seconds) == (None, None)
    assert fresh.seconds_since_commit is not None
    assert loaded.bi.freshness("nobody") is None


def test_the_history_holds_every_revision_of_the_stream_once(loaded):
    data = dataset()
    history = fetch_revisions(loaded, MERCHANT)
    keys = [(row["record_id"], row["revision"]) for row in history]
    assert len(keys) == len(set(keys))
    stream = {(change.record_id, change.revision): change.sequence for change in data.changes}
    with_sequence = {key: row["sequence"] for key, row in zip(keys, history, strict=True)}
    for key, sequence in stream.items():
        assert with_sequence[key] == sequence  # snapshot-first revisions were filled in
    # The edge rounds came from snapshots only: present, without a sequence.
    assert with_sequence[("edge-void", 1)] is None
    assert len(keys) == len(stream) + len(
        [r for r in data.records[MERCHANT] if r.record_id.startswith("edge-")]
    )

"""The generated history and live traffic obey the record rules (pure, no sockets)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordsync.core.money import MAX_TRANSACTION_AMOUNT, is_money
from recordsync.sim.data import DAY_MS, LiveEvents, generate_history
from recordsync.sim.render import Renderer, format_amount, format_ms
from recordsync.sim.store import Store

NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SCALES = {"JPY": 0, "USD": 2, "EUR": 2, "USDT": 4}


def every_revision(history) -> list[dict]:
    """Every change of the history as printed, in sequence order."""
    render = Renderer(history.catalog, history.columns)
    cols = history.columns
    return [render.record_dict(change) for change in cols.order]


def check_revision(record: dict) -> None:
    values = {}
    for name in ("bet", "refund", "payout", "net"):
        text = record[f"{name}_amount"]
        assert is_money(text), text
        assert len(text.partition(".")[2]) == SCALES[record["currency"]], text
        values[name] = Decimal(text)
    assert values["net"] == values["payout"] + values["refund"] - values["bet"]
    assert values["bet"] >= 0
    assert values["payout"] >= 0
    assert 0 <= values["refund"] <= values["bet"]
    assert record["revision"] >= 1
    if record["revision"] == 1:
        assert values["bet"] == 0
        assert record["status"] == "OPEN"
    if record["status"] == "SETTLED":
        assert record["settled_at"] is not None
        assert record["created_at"] <= record["settled_at"] <= record["updated_at"]
    else:
        assert record["settled_at"] is None
    if record["status"] == "VOID":
        assert values["refund"] == values["bet"]
        assert values["payout"] == 0
    assert record["created_at"] <= record["updated_at"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32), days=st.sampled_from([0.1, 0.5, 2.0]))
def test_every_generated_revision_keeps_net_equal_to_payout_plus_refund_minus_bet(seed, days):
    history = generate_history(seed=seed, history_days=days, rounds_per_day=800, now_ms=NOW_MS)
    revisions = every_revision(history)

    assert revisions
    last_revision: dict[str, int] = {}
    now = format_ms(NOW_MS)
    for record in revisions:
        check_revision(record)
        assert record["updated_at"] <= now
        previous = last_revision.get(record["record_id"], 0)
        assert record["revision"] == previous + 1  # in sequence order, one revision at a time
        last_revision[record["record_id"]] = record["revision"]
    updated = [r["updated_at"] for r in revisions]
    assert updated == sorted(updated)  # sequences follow the time of change


def test_the_same_seed_and_now_give_the_same_history():
    one = every_revision(
        generate_history(seed=3, history_days=1, rounds_per_day=500, now_ms=NOW_MS)
    )
    two = every_revision(
        generate_history(seed=3, history_days=1, rounds_per_day=500, now_ms=NOW_MS)
    )
    other = every_revision(
        generate_history(seed=4, history_days=1, rounds_per_day=500, now_ms=NOW_MS)
    )
    assert one == two
    assert one != other


@pytest.fixture(scope="module")
def big_history():
    return generate_history(seed=11, history_days=4, rounds_per_day=6000, now_ms=NOW_MS)


@pytest.fixture(scope="module")
def big_latest(big_history):
    render = Renderer(big_history.catalog, big_history.columns)
    return [render.record_dict(change) for change in big_history.columns.last_change]


def test_the_history_spans_the_configured_days_and_rate(big_history, big_latest):
    cols = big_history.columns
    assert cols.record_count == 24_000
    assert min(cols.created_ms) >= NOW_MS - 4 * DAY_MS
    assert max(cols.changed_ms) <= NOW_MS
    statuses = {r["status"] for r in big_latest}
    assert statuses == {"OPEN", "SETTLED", "VOID"}
    assert {r["currency"] for r in big_latest} == set(SCALES)


def test_amounts_reach_the_per_transaction_maximum_and_beyond(big_latest):
    bets = [Decimal(r["bet_amount"]) for r in big_latest]
    payouts = [Decimal(r["payout_amount"]) for r in big_latest]
    assert max(bets) <= MAX_TRANSACTION_AMOUNT
    assert max(bets) >= Decimal(999999999999)
    assert max(payouts) > MAX_TRANSACTION_AMOUNT  # cumulative amounts may exceed it
    assert min(Decimal(r["net_amount"]) for r in big_latest) < 0


def test_child_rounds_point_at_an_earlier_round_of_the_same_player(big_latest):
    by_round = {r["round_id"]: r for r in big_latest}
    children = [r for r in big_latest if r["parent_round_id"] is not None]
    assert len(children) > 100
    for child in children:
        parent = by_round[child["parent_round_id"]]
        assert parent["player_id"] == child["player_id"]
        assert parent["created_at"] <= child["created_at"]
        assert child["bet_amount"].strip("0.") == ""  # free rounds have no bet


def test_revisions_spread_from_seconds_to_days_after_creation(big_history):
    cols = big_history.columns
    delays = [cols.changed_ms[c] - cols.created_ms[cols.rec[c]] for c in range(cols.change_count)]
    assert min(delays) == 0  # revision 1 is the creation
    assert any(60_000 <= d < 3_600_000 for d in delays)  # minutes
    assert any(3_600_000 <= d < DAY_MS for d in delays)  # hours
    assert any(d >= DAY_MS for d in delays)  # days later
    assert max(cols.revision) >= 5


def test_ids_are_distinct_version_4_uuids(big_latest):
    record_ids = [r["record_id"] for r in big_latest]
    round_ids = [r["round_id"] for r in big_latest]
    assert len(set(record_ids)) == len(record_ids)
    assert not set(record_ids) & set(round_ids)
    for value in record_ids[:100] + round_ids[:100]:
        assert value[14] == "4"
        assert value[19] in "89ab"


def test_live_events_create_rounds_and_revise_old_ones_within_the_rules():
    history = generate_history(seed=5, history_days=3, rounds_per_day=400, now_ms=NOW_MS)
    store = Store(history, LiveEvents(5))
    records_before = store.record_count
    changes_before = store.change_count

    store.apply_live(3000, NOW_MS + 1000)
    store.apply_live(10, NOW_MS)  # a clock that went back: change times never do

    cols = history.columns
    assert store.record_count > records_before
    assert store.change_count == changes_before + 3010
    live = range(changes_before, store.change_count)
    assert min(cols.changed_ms[cols.order[p]] for p in live) == NOW_MS + 1000
    revised_old = {
        cols.rec[cols.order[p]]
        for p in live
        if cols.created_ms[cols.rec[cols.order[p]]] < NOW_MS - DAY_MS
    }
    assert revised_old, "live traffic revises records created days ago"
    render = Renderer(history.catalog, cols)
    seen: dict[str, int] = {}
    for position in range(store.change_count):
        record = render.record_dict(cols.order[position])
        check_revision(record)
        assert record["revision"] == seen.get(record["record_id"], 0) + 1
        seen[record["record_id"]] = record["revision"]


@pytest.mark.parametrize(
    ("units", "scale", "text"),
    [
        (0, 0, "0"),
        (0, 2, "0.00"),
        (0, 4, "0.0000"),
        (12_3400, 2, "12.34"),
        (-12_3400, 2, "-12.34"),
        (-5000, 2, "-0.50"),
        (1_0000, 0, "1"),
        (9_999_999_999_999_999, 4, "999999999999.9999"),
        (19_999_999_999_999_998, 4, "1999999999999.9998"),
    ],
    ids=[
        "zero-jpy",
        "zero-usd",
        "zero-usdt",
        "usd",
        "negative",
        "negative-fraction",
        "jpy",
        "maximum",
        "beyond-maximum",
    ],
)
def test_amounts_are_printed_with_exactly_the_currency_scale(units, scale, text):
    assert format_amount(units, scale) == text


def test_times_have_exactly_three_millisecond_digits_and_z():
    assert format_ms(NOW_MS) == "2026-01-01T00:00:00.000Z"
    assert format_ms(NOW_MS + 1) == "2026-01-01T00:00:00.001Z"
    assert format_ms(NOW_MS - 1) == "2025-12-31T23:59:59.999Z"

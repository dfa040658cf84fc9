"""The pure boundary rules of the sync: snapshot end and window planning."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recordsync.core.state import Window, WindowProgress
from recordsync.core.times import MILLISECOND
from recordsync.sync.plan import (
    MAX_WINDOW,
    hand_out_order,
    highest_sequence,
    plan_windows,
    snapshot_end,
)
from recordsync.sync.windows import split_range


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_snapshot_end_covers_a_record_created_in_the_anchors_millisecond() -> None:
    anchor = at("2026-11-21T10:00:00.123456+00:00")
    end = snapshot_end(anchor, overlap=timedelta(0))
    created_in_anchor_ms = at("2026-11-21T10:00:00.123999+00:00").replace(microsecond=123000)
    # created_to is exclusive: the record must be strictly before the end.
    assert created_in_anchor_ms < end
    assert end == at("2026-11-21T10:00:00.124+00:00")


def test_snapshot_end_adds_the_overlap_after_the_anchor() -> None:
    anchor = at("2026-11-21T10:00:00.000+00:00")
    assert snapshot_end(anchor) == anchor + MILLISECOND + timedelta(seconds=60)


def test_snapshot_end_refuses_a_negative_overlap() -> None:
    with pytest.raises(ValueError, match="gap"):
        snapshot_end(at("2026-11-21T10:00:00+00:00"), overlap=timedelta(seconds=-1))


def test_windows_are_aligned_on_utc_days_with_short_ends() -> None:
    windows = plan_windows(at("2026-11-18T15:30:00+00:00"), at("2026-11-21T08:00:00.5+00:00"))
    assert windows == [
        Window(at("2026-11-18T15:30:00+00:00"), at("2026-11-19T00:00:00+00:00")),
        Window(at("2026-11-19T00:00:00+00:00"), at("2026-11-20T00:00:00+00:00")),
        Window(at("2026-11-20T00:00:00+00:00"), at("2026-11-21T00:00:00+00:00")),
        Window(at("2026-11-21T00:00:00+00:00"), at("2026-11-21T08:00:00.5+00:00")),
    ]


def test_windows_convert_offsets_to_utc() -> None:
    windows = plan_windows(at("2026-11-20T01:00:00+05:30"), at("2026-11-20T02:00:00+05:30"))
    assert windows == [Window(at("2026-11-19T19:30:00+00:00"), at("2026-11-19T20:30:00+00:00"))]


def test_empty_range_has_no_windows() -> None:
    moment = at("2026-11-20T00:00:00+00:00")
    assert plan_windows(moment, moment) == []


def test_sub_millisecond_bounds_are_widened_never_narrowed() -> None:
    (window,) = plan_windows(
        at("2026-11-20T00:00:00.0005+00:00"), at("2026-11-20T00:00:01.0005+00:00")
    )
    assert window.start == at("2026-11-20T00:00:00+00:00")
    assert window.end == at("2026-11-20T00:00:01.001+00:00")


instants = st.datetimes(
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001 - hypothesis wants naive bounds
    max_value=datetime(2030, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)


@given(start=instants, length=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=40)))
def test_windows_tile_the_range_without_gap_or_overlap(start: datetime, length: timedelta) -> None:
    end = start + length
    windows = plan_windows(start, end)
    if not windows:
        assert end - start < MILLISECOND
        return
    assert windows[0].start <= start
    assert windows[-1].end >= end
    for window in windows:
        assert timedelta(0) < window.end - window.start <= MAX_WINDOW
        assert window.start.microsecond % 1000 == 0
        assert window.end.microsecond % 1000 == 0
    for before, after in itertools.pairwise(windows):
        assert before.end == after.start


def test_highest_sequence_compares_beyond_64_bits() -> None:
    class Change:
        def __init__(self, sequence: str) -> None:
            self.sequence = sequence

    changes = [Change("18446744073709551617"), Change("9"), Change("18446744073709551616")]
    assert highest_sequence(changes) == "18446744073709551617"  # type: ignore[arg-type]
    assert highest_sequence([]) is None


def pending(window: Window, cursor: str | None = None) -> WindowProgress:
    return WindowProgress(
        merchant_id="m",
        job="rebuild",
        window=window,
        cursor=cursor,
        cursor_issued_at=None if cursor is None else window.start,
        done=False,
        records=0,
    )


def test_hand_out_puts_the_partial_windows_at_the_ends_of_a_range_last() -> None:
    windows = plan_windows(at("2026-11-17T23:00:00+00:00"), at("2026-11-21T08:00:00+00:00"))
    first_day, *full_days, last_day = windows
    order = [item.window for item in hand_out_order([pending(w) for w in windows])]
    # the full days in date order (a day can take no other), then the 8 h end, the 1 h start
    assert order == [*full_days, last_day, first_day]


def test_hand_out_leaves_the_window_after_each_one_taken_unread_along_equal_windows() -> None:
    """So that each chain can carry the rest of its window into the next one."""
    start = at("2026-11-20T13:02:35.030000+00:00")
    windows = split_range(start, start + timedelta(days=7, hours=1), 8)
    order = [item.window for item in hand_out_order([pending(w) for w in windows])]
    assert order == windows[0::2] + windows[1::2]
    # A window already begun breaks the run: the one after it starts a new one.
    resumed = hand_out_order([pending(windows[0], "c1"), *(pending(w) for w in windows[1:4])])
    assert [item.window for item in resumed] == [windows[0], windows[1], windows[3], windows[2]]


def test_hand_out_resumes_partly_read_windows_first_even_short_ones() -> None:
    short = Window(at("2026-11-17T23:00:00+00:00"), at("2026-11-18T00:00:00+00:00"))
    day = Window(at("2026-11-18T00:00:00+00:00"), at("2026-11-19T00:00:00+00:00"))
    resumed_day = Window(at("2026-11-19T00:00:00+00:00"), at("2026-11-20T00:00:00+00:00"))
    order = hand_out_order([pending(day), pending(short, "c1"), pending(resumed_day, "c2")])
    assert [item.window for item in order] == [resumed_day, short, day]


def test_hand_out_of_nothing_is_nothing() -> None:
    assert hand_out_order([]) == []


windows_of_a_range = st.lists(
    st.tuples(
        instants,
        st.timedeltas(min_value=MILLISECOND, max_value=MAX_WINDOW),
        st.booleans(),
    ),
    max_size=12,
).map(
    lambda rows: [
        pending(Window(start, start + length), "cursor" if resumed else None)
        for start, length, resumed in rows
    ]
)


@given(items=windows_of_a_range, seed=st.randoms(use_true_random=False))
def test_hand_out_is_longest_first_within_resumed_then_fresh_whatever_the_input_order(
    items: list[WindowProgress], seed: random.Random
) -> None:
    order = hand_out_order(items)
    shuffled = list(items)
    seed.shuffle(shuffled)
    assert hand_out_order(shuffled) == order  # deterministic: the input order does not matter
    assert sorted(order, key=id) == sorted(items, key=id)  # every window handed out once
    resumed = [item for item in order if item.cursor is not None]
    assert order[: len(resumed)] == resumed
    for before, after in itertools.pairwise(order):
        if (before.cursor is None) != (after.cursor is None):
            continue
        longer = before.window.end - before.window.start
        shorter = after.window.end - after.window.start
        # Ties by start, except fresh windows under 24 h: every other one of a run goes first.
        alternates = after.cursor is None and longer < MAX_WINDOW
        assert longer > shorter or (
            longer == shorter and (before.window.start <= after.window.start or alternates)
        )

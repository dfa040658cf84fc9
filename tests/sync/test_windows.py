"""Windows planned for concurrency (``sync.windows``): the pure rules, then a snapshot that
re-splits its windows as it goes and is resumed after a crash, on the fakes."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.fakes import (
    HOUR,
    MERCHANT,
    NOW,
    FakePlatform,
    FakeStore,
    make_context,
    make_engine,
    record,
)
from support.synccheck import KillAfterSplit

from recordsync.core.state import Window, WindowProgress, backfill_job
from recordsync.core.stopping import Stopper
from recordsync.core.times import MILLISECOND, ceil_ms, floor_ms
from recordsync.platform.budget import Pace
from recordsync.sync.plan import plan_windows
from recordsync.sync.snapshot.chain import read_window
from recordsync.sync.snapshot.job import first_plan, plan_snapshot, starting_chains
from recordsync.sync.snapshot.pending_windows import PendingWindows
from recordsync.sync.windows import (
    MAX_CHAINS,
    MAX_WINDOW,
    MIN_PAGES_PER_PIECE,
    carry_over,
    chains_needed,
    plan_for_chains,
    resplit,
    resplit_parts,
    split_range,
)

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
times = st.integers(min_value=0, max_value=20 * 86_400_000_000).map(
    lambda micros: EPOCH + timedelta(microseconds=micros)
)
whole_ms = st.integers(min_value=0, max_value=20 * 86_400_000).map(
    lambda ms: EPOCH + ms * MILLISECOND
)


def assert_tiles(windows: list[Window], start: datetime, end: datetime) -> None:
    """The windows cover ``[start, end)`` exactly, in order, each > 0 and <= 24 h, on ms."""
    assert windows[0].start == start
    assert windows[-1].end == end
    for left, right in itertools.pairwise(windows):
        assert left.end == right.start
    for window in windows:
        assert timedelta(0) < window.end - window.start <= MAX_WINDOW
        assert window.start.microsecond % 1000 == 0
        assert window.end.microsecond % 1000 == 0


@given(times, times, st.integers(min_value=1, max_value=40))
def test_a_plan_covers_its_range_exactly_in_windows_of_at_most_a_day(
    first: datetime, second: datetime, chains: int
) -> None:
    start, end = min(first, second), max(first, second)
    windows = plan_for_chains(start, end, chains)
    # Taken to whole milliseconds outward: never less than asked for.
    low, high = floor_ms(start), ceil_ms(end)
    if low == high:
        assert windows == []
        return
    assert_tiles(windows, low, high)
    span = high - low
    days = -(-span // MAX_WINDOW)
    # As many windows as the chains need (if the range has that many milliseconds), no more
    # than that or than the days need: each extra window is one more partial page.
    assert len(windows) == min(max(chains, days), span // MILLISECOND)


@given(whole_ms, st.integers(min_value=1, max_value=10 * 86_400_000), st.integers(1, 50))
def test_split_pieces_are_equal_to_the_millisecond(
    start: datetime, span_ms: int, parts: int
) -> None:
    end = start + span_ms * MILLISECOND
    windows = split_range(start, end, parts)
    assert_tiles(windows, start, end)
    lengths = {window.end - window.start for window in windows}
    assert max(lengths) - min(lengths) <= MILLISECOND


@given(whole_ms, st.integers(min_value=2, max_value=86_400_000), times, st.integers(0, 20))
# Read up to the last millisecond of a 2 ms window: a rest of 1 ms, which no cut divides.
@example(EPOCH, 2, EPOCH + timedelta(microseconds=1000), 2)
def test_a_resplit_covers_the_rest_of_the_window_from_the_last_records_millisecond(
    start: datetime, span_ms: int, read_up_to: datetime, parts: int
) -> None:
    window = Window(start, start + span_ms * MILLISECOND)
    pieces = resplit(window, read_up_to, parts)
    at = read_up_to.replace(microsecond=read_up_to.microsecond // 1000 * 1000)
    if parts <= 1 or not window.start < at or window.end - at < 2 * MILLISECOND:
        assert pieces == []
        return
    # Every record before the last one's millisecond was read: the pieces start there.
    assert_tiles(pieces, at, window.end)
    assert 1 < len(pieces) <= parts


def test_split_refuses_bounds_finer_than_a_millisecond_and_empty_ranges() -> None:
    with pytest.raises(ValueError, match="milliseconds"):
        split_range(EPOCH + timedelta(microseconds=1), EPOCH + HOUR, 2)
    with pytest.raises(ValueError, match="empty"):
        split_range(EPOCH, EPOCH, 2)


@pytest.mark.parametrize(
    ("round_trip", "work", "expected"),
    [
        (0.0, 0.0, 1),  # answers at once: one chain keeps up
        (0.01, 0.0, 2),  # one in flight, one spare
        (0.4, 0.1, 2),  # a request every 0.525 s: one in flight, one spare
        (1.0, 0.1, 4),  # 1 s latency plus a commit: three in flight and a spare
        (3.0, 0.1, 7),  # 3 s: six in flight and a spare
        (60.0, 0.0, MAX_CHAINS),
    ],
)
def test_chains_needed_for_the_default_budget(round_trip: float, work: float, expected: int):
    assert (
        chains_needed(requests=2, seconds=1.0, margin=0.05, round_trip=round_trip, work=work)
        == expected
    )


def test_with_a_lifted_limit_only_the_round_trip_is_worth_more_chains() -> None:
    lifted = {"requests": 100_000, "seconds": 1.0, "margin": 0.05}
    assert chains_needed(**lifted, round_trip=0.01, work=0.1) == 3
    assert chains_needed(**lifted, round_trip=0.5, work=0.1) == 7
    assert chains_needed(**lifted, round_trip=0.01) == MAX_CHAINS


def test_chains_needed_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="expected"):
        chains_needed(requests=0, seconds=1.0, margin=0.05, round_trip=1.0)


@pytest.mark.parametrize(
    ("chains", "pages", "expected"),
    [
        ((4, 4, 0), (100.0, 0.0), 1),  # enough chains: read on
        ((4, 2, 2), (100.0, 0.0), 1),  # the queue fills the gap
        ((7, 2, 0), (100.0, 0.0), 6),  # alone with the job: this one and five new pieces
        ((7, 2, 0), (100.0, 40.0), 5),  # 140 pages for 7 chains: 20 each, so 5 pieces here
        ((7, 2, 0), (3 * MIN_PAGES_PER_PIECE, 0.0), 3),  # only as many pieces as hold a few pages
        ((7, 2, 0), (MIN_PAGES_PER_PIECE * 2 - 0.1, 0.0), 1),  # too little left to cut
        # The end of a job: six chains of about equal shares left, one missing.  None cuts,
        # each would only add a partial page for a chain that ends with the others.
        ((7, 6, 0), (30.0, 150.0), 1),
        # One chain holds far more than the others: it is cut to their size.
        ((7, 6, 0), (60.0, 50.0), 2),
    ],
)
def test_resplit_parts(
    chains: tuple[int, int, int], pages: tuple[float, float], expected: int
) -> None:
    """``chains``: wanted, in flight, queued; ``pages``: left in this chain, elsewhere."""
    assert parts_for(*chains, *pages) == expected


def parts_for(
    wanted: int, in_flight: int, queued: int, pages_left: float, others_left: float
) -> int:
    return resplit_parts(
        wanted=wanted,
        in_flight=in_flight,
        queued=queued,
        pages_left=pages_left,
        others_left=others_left,
    )


@given(
    st.integers(1, MAX_CHAINS),
    st.integers(1, MAX_CHAINS),
    st.integers(0, MAX_CHAINS),
    st.floats(0, 10_000, allow_nan=False),
    st.floats(0, 100_000, allow_nan=False),
)
def test_a_resplit_cuts_equal_shares_never_more_than_the_missing_chains(
    wanted: int, in_flight: int, queued: int, pages_left: float, others_left: float
) -> None:
    parts = parts_for(wanted, in_flight, queued, pages_left, others_left)
    missing = wanted - in_flight - queued
    assert 1 <= parts <= max(1, missing + 1)
    if parts > 1:
        # Each piece holds a few pages, and no piece is much more than its share of the job
        # would be if every chain wanted were busy: this chain does not end long after them.
        assert pages_left / parts >= MIN_PAGES_PER_PIECE
        share = (pages_left + others_left) / wanted
        assert pages_left / parts >= min(share, pages_left) / 2
    if parts == 1 and missing > 0 and pages_left >= 2 * MIN_PAGES_PER_PIECE:
        # Read on whole only when this chain's rest is within half a share of the others'.
        share = max((pages_left + others_left) / wanted, MIN_PAGES_PER_PIECE)
        assert pages_left < 1.5 * share


def test_a_carry_joins_the_rest_of_a_window_and_the_next_from_the_last_records_millisecond():
    window = Window(EPOCH, EPOCH + 20 * HOUR)
    following = Window(window.end, window.end + 20 * HOUR)
    late = window.end - 3 * HOUR + timedelta(microseconds=1500)
    joined = carry_over(window, following, late)
    assert joined == Window(floor_ms(late), following.end)
    assert joined.end - joined.start <= MAX_WINDOW


@pytest.mark.parametrize(
    ("read_up_to", "following"),
    [
        # the two would make more than 24 h
        (EPOCH + 15 * HOUR, Window(EPOCH + 20 * HOUR, EPOCH + 40 * HOUR)),
        # the next window does not start where this one ends
        (EPOCH + 19 * HOUR, Window(EPOCH + 21 * HOUR, EPOCH + 30 * HOUR)),
        # nothing left: the last record is at the window's end or past it
        (EPOCH + 20 * HOUR, Window(EPOCH + 20 * HOUR, EPOCH + 30 * HOUR)),
        # nothing read past the window's start: the window would not shrink
        (EPOCH + timedelta(microseconds=500), Window(EPOCH + 20 * HOUR, EPOCH + 30 * HOUR)),
    ],
)
def test_no_carry_past_24_h_across_a_gap_or_without_a_rest(
    read_up_to: datetime, following: Window
) -> None:
    assert carry_over(Window(EPOCH, EPOCH + 20 * HOUR), following, read_up_to) is None


@given(
    start=whole_ms,
    first=st.integers(2, 86_400_000),
    second=st.integers(1, 86_400_000),
    at=st.floats(0, 1),
)
def test_a_carry_tiles_what_the_two_windows_covered(
    start: datetime, first: int, second: int, at: float
) -> None:
    window = Window(start, start + first * MILLISECOND)
    following = Window(window.end, window.end + second * MILLISECOND)
    read_up_to = window.start + (window.end - window.start) * at
    joined = carry_over(window, following, read_up_to)
    if joined is None:
        return
    assert_tiles([Window(window.start, joined.start), joined], window.start, following.end)
    assert joined.end - joined.start <= MAX_WINDOW


# -- the snapshot re-splits as it goes (fakes) ------------------------------------------------

START = datetime(2024, 3, 4, 1, tzinfo=UTC)
END = datetime(2024, 3, 4, 21, tzinfo=UTC)  # one window by days
DENSE = [
    record(f"r{n:03}", created=START + n * 6 * timedelta(minutes=1), updated=NOW)
    for n in range(200)
]


class SlowPlatform(FakePlatform):
    """Says a 3 s round trip was measured once it answered a first request."""

    def pace(self) -> Pace:
        return Pace(2, 1.0, 0.05, 3.0 if self.calls else None)


def test_a_short_backfill_is_cut_for_more_chains_and_reads_every_record() -> None:
    store = FakeStore()
    platform = SlowPlatform(records=DENSE)

    result = make_engine(platform, store, page_size=5).backfill(START, END)

    windows = store.windows(backfill_job(START, END))
    assert len(windows) >= chains_needed(requests=2, seconds=1.0, margin=0.05, round_trip=3.0)
    assert_tiles([item.window for item in windows], START, END)
    assert all(item.done for item in windows)
    assert set(store.rows) == {item.record_id for item in DENSE}
    assert result.records >= len(DENSE)  # a cut may read its millisecond's records twice


class StartsWide(FakePlatform):
    """Counts the first pages asked before any was answered: the chains a job starts with."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.first_requests: list[str] = []

    def records_first(self, created_from, created_to, **kwargs):  # type: ignore[no-untyped-def]
        self.first_requests.append(created_from.isoformat())
        return super().records_first(created_from, created_to, **kwargs)


def test_a_short_job_starts_as_wide_as_the_round_trip_known_at_its_start_needs() -> None:
    """Issue 27: a one-day job at a 3 s round trip (the capabilities call's, known before any
    page) starts with 7 chains from its first second, not 4 that cut more once answered."""
    store = FakeStore()
    platform = StartsWide(records=DENSE)
    platform.round_trip = 3.0
    wanted = chains_needed(requests=2, seconds=1.0, margin=0.05, round_trip=3.0)
    assert wanted == 7

    make_engine(platform, store, page_size=5, snapshot_concurrency=4).backfill(START, END)

    windows = store.windows(backfill_job(START, END))
    assert len(windows) >= wanted
    # Every one of the first plan's windows was read by a chain of its own from the start.
    assert len(platform.first_requests) >= wanted
    assert_tiles([item.window for item in windows], START, END)
    assert set(store.rows) == {item.record_id for item in DENSE}


def test_a_job_starts_no_wider_than_its_share_of_the_worker_threads() -> None:
    platform = FakePlatform(records=DENSE)
    platform.round_trip = 3.0
    shared = make_context(
        platform, FakeStore(), page_size=5, snapshot_concurrency=1, snapshot_most_chains=2
    )
    assert starting_chains(shared) == 2
    assert len(first_plan(shared, START, END)) == 2
    alone = make_context(platform, FakeStore(), page_size=5, snapshot_concurrency=4)
    assert starting_chains(alone) == 7
    platform.round_trip = None  # nothing known at the start: the chains configured
    assert starting_chains(alone) == 4


def test_a_short_backfill_with_no_round_trip_measured_is_planned_for_the_chains_configured():
    store = FakeStore()
    platform = FakePlatform(records=DENSE)  # no round trip measured: no cut as it goes

    make_engine(platform, store, page_size=5, snapshot_concurrency=4).backfill(START, END)

    windows = store.windows(backfill_job(START, END))
    assert len(plan_windows(START, END)) == 1
    assert len(windows) == 4
    assert_tiles([item.window for item in windows], START, END)
    assert all(item.done for item in windows)
    assert set(store.rows) == {item.record_id for item in DENSE}


def test_a_long_backfill_is_planned_in_equal_windows_not_in_days() -> None:
    """Three days and 20 hours: four equal windows, not two whole days and two partial ones,
    so that no chain outlives the others by the length of a day."""
    store = FakeStore()
    start, end = START - 3 * 24 * HOUR, END

    make_engine(FakePlatform(records=DENSE), store, snapshot_concurrency=2).backfill(start, end)

    planned = [item.window for item in store.windows(backfill_job(start, end))]
    assert len(plan_windows(start, end)) == 4
    assert len(planned) == 4
    assert_tiles(planned, start, end)
    lengths = {item.end - item.start for item in planned}
    assert max(lengths) - min(lengths) <= MILLISECOND


def test_a_chain_s_pages_left_rank_its_requests_most_first() -> None:
    """Reported, measured at the density so far, or infinite before any density."""
    chunks = [Window(START + n * HOUR, START + (n + 1) * HOUR) for n in range(3)]
    pending = [WindowProgress(MERCHANT, "job", chunk, None, None, False, 0) for chunk in chunks]
    snapshot = PendingWindows(pending, workers=3)
    first = snapshot.take()
    assert first is not None
    assert snapshot.pages_left(chunks[1]) == float("inf")

    # 10 pages over the first half hour of its hour: 20 pages an hour, 10 left.
    snapshot.report(first.window, read=10.0, covered_ms=HOUR / MILLISECOND / 2, left=10.0)

    assert snapshot.pages_left(first.window) == 10.0
    assert snapshot.pages_left(chunks[1]) == pytest.approx(20.0)


def test_a_snapshot_asks_for_its_pages_ranked_by_what_its_chain_has_left() -> None:
    store = FakeStore()
    platform = SlowPlatform(records=DENSE)

    make_engine(platform, store, page_size=5).backfill(START, END)

    ranks = [call.rank for call in platform.calls_to("records_first", "records_next")]
    assert ranks[0] == float("inf")  # nothing measured yet
    finite = [rank for rank in ranks if rank != float("inf")]
    assert finite
    assert all(0 < rank < len(DENSE) / 5 for rank in finite)


def test_a_chain_s_work_counts_its_wait_for_the_writer_not_only_its_commit() -> None:
    """What a chain spends between its answer and its next request is part of its cycle, and
    so of the chains the budget needs; waiting behind another chain's commit is most of it."""
    store = FakeStore()
    ctx = make_context(FakePlatform(records=DENSE[:3]), store, page_size=5)
    window = Window(START, END)
    store.ensure_job("job", [window])
    snapshot = PendingWindows(store.windows("job"), workers=1)
    item = snapshot.take()
    assert item is not None
    # Another chain's commit holds the one writer for 0.5 s from now; the chain's own clock
    # starts only once its answer is parsed, a moment later, so it must see most of that wait
    # (its own commit alone is well under a millisecond here).
    ctx.writer.__enter__()
    threading.Timer(0.5, lambda: ctx.writer.__exit__(None, None, None)).start()

    read_window(ctx, "job", item, ctx.runner(Stopper(), fatal_is_final=True), snapshot)

    assert snapshot.work_seconds is not None
    assert snapshot.work_seconds >= 0.3


def test_a_split_snapshot_killed_mid_way_resumes_to_every_record() -> None:
    store = FakeStore()
    crash = KillAfterSplit(pages=25)
    # One platform for both processes: its cursors outlive the process that got them.
    platform = SlowPlatform(records=DENSE)
    with pytest.raises(RuntimeError, match="kill -9"):
        make_engine(platform, store, page_size=5, observer=crash).backfill(START, END)
    job = backfill_job(START, END)
    left = [item for item in store.windows(job) if not item.done]
    assert left, "the crash came before the end"
    assert len(store.windows(job)) > 1, "the crash came after a split"
    assert_tiles([item.window for item in store.windows(job)], START, END)

    done_before = {item.window.start.isoformat() for item in store.windows(job) if item.done}
    # A new process: the same command, the same store.
    before = len(platform.calls)
    make_engine(platform, store, page_size=5).backfill(START, END)

    assert_tiles([item.window for item in store.windows(job)], START, END)
    assert all(item.done for item in store.windows(job))
    assert set(store.rows) == {item.record_id for item in DENSE}
    # Only what was left was read again: no window done before the crash is started anew.
    started = {call.at for call in platform.calls[before:] if call.endpoint == "records_first"}
    assert not started & done_before


def test_more_windows_than_workers_get_more_workers_before_any_cut() -> None:
    chunks = [Window(START + n * HOUR, START + (n + 1) * HOUR) for n in range(7)]
    pending = [WindowProgress(MERCHANT, "job", chunk, None, None, False, 0) for chunk in chunks]
    snapshot = PendingWindows(pending, workers=2, most_workers=MAX_CHAINS)
    spawned: list[int] = []
    snapshot.spawn = spawned.append
    snapshot.start()
    first, second = snapshot.take(), snapshot.take()
    assert first is not None
    assert second is not None

    snapshot.grow(7)  # 7 chains wanted, 2 read, 5 windows queued: 5 more workers
    snapshot.grow(7)  # and no more
    assert spawned == [5]
    # Nothing is cut while queued windows still have workers coming for them.
    assert snapshot.reserve(7, pages_left=100.0, others_left=0.0) == 1


@pytest.mark.parametrize(("most_chains", "expected"), [(None, MAX_CHAINS), (3, 4), (6, 6)])
def test_a_snapshot_grows_to_at_most_its_share_of_a_shared_host(
    most_chains: int | None, expected: int
) -> None:
    """A daemon of many merchants gives each its share (runtime.fair_concurrency):
    a merchant's growth must not take the threads the others' chains need."""
    store = FakeStore()
    windows = [Window(START + n * HOUR, START + (n + 1) * HOUR) for n in range(20)]
    store.ensure_job("job", windows)
    ctx = make_engine(
        FakePlatform(), store, snapshot_concurrency=4, snapshot_most_chains=most_chains
    )._context
    snapshot = plan_snapshot(ctx, "job", Stopper())
    assert snapshot is not None
    assert snapshot.most_workers == expected  # never below the configured concurrency


def test_the_pages_left_elsewhere_count_reports_and_unread_windows_at_the_measured_density():
    """What a cut shares out (``resplit_parts``' ``others_left``): the other chains' reported
    pages left, and the windows nobody has measured yet at the density measured so far."""
    hours = [Window(START + n * HOUR, START + (n + 1) * HOUR) for n in range(4)]
    pending = [WindowProgress(MERCHANT, "job", item, None, None, False, 0) for item in hours]
    snapshot = PendingWindows(pending, workers=3, most_workers=MAX_CHAINS)
    taken = [snapshot.take() for _ in range(3)]
    assert all(item is not None for item in taken)
    ms_per_hour = HOUR / MILLISECOND
    # 2 pages over half an hour in the first, 6 over half an hour in the second: 8 pages
    # an hour on average, the density taken for windows not measured yet.
    snapshot.report(hours[0], read=2.0, covered_ms=ms_per_hour / 2, left=10.0)
    snapshot.report(hours[1], read=6.0, covered_ms=ms_per_hour / 2, left=3.0)
    # Elsewhere from the first: the second's 3, the third (taken, unmeasured) and the
    # fourth (queued) at 8 pages an hour each.
    assert snapshot.pages_elsewhere(hours[0]) == pytest.approx(3.0 + 8.0 + 8.0)
    assert snapshot.pages_elsewhere(hours[1]) == pytest.approx(10.0 + 8.0 + 8.0)
    # A finished window no longer counts, nor does its density: 4 pages an hour now.
    snapshot.report(hours[1], read=0.0, covered_ms=0.0, left=0.0)
    assert snapshot.pages_elsewhere(hours[0]) == pytest.approx(4.0 + 4.0)


def test_progress_is_reported_with_every_change_under_the_lock() -> None:
    """A report made after the lock could carry a count taken before another chain's window
    ended and land after that window's own report: the progress went back (3 of 4 done for a
    job that was done).  Under the lock, reports come in the order of the changes."""
    hours = [Window(START + n * HOUR, START + (n + 1) * HOUR) for n in range(3)]
    pending = [WindowProgress(MERCHANT, "job", item, None, None, False, 0) for item in hours]
    snapshot = PendingWindows(pending, workers=2, most_workers=MAX_CHAINS)
    reports: list[tuple[int, int, bool]] = []
    snapshot.on_progress = lambda total, done: reports.append((total, done, snapshot.lock.locked()))
    first, second = snapshot.take(), snapshot.take()  # the first and the last hour
    assert first is not None
    assert second is not None
    assert [first.window, second.window] == [hours[0], hours[2]]
    half = Window(hours[2].start, hours[2].start + HOUR / 2)
    rest = Window(half.end, hours[2].end)
    snapshot.reserved += 1  # as a cut's ``reserve`` does
    snapshot.offer(
        hours[2], [half, rest], [WindowProgress(MERCHANT, "job", rest, None, None, False, 0)]
    )
    claimed = snapshot.claim_following(hours[0], hours[0].start + HOUR / 2, 0)
    assert claimed is not None
    snapshot.carry_into(hours[0], claimed[1])
    snapshot.window_finished()
    assert reports == [(5, 1, True), (5, 2, True), (5, 3, True)]


class FastPlatform(FakePlatform):
    """Says a 10 ms round trip was measured once it answered a first request: two chains keep
    the budget busy, so windows beyond that are spare."""

    def pace(self) -> Pace:
        return Pace(2, 1.0, 0.05, 0.01 if self.calls else None)


THREE = [
    record(f"c{n:03}", created=START + n * 6 * timedelta(minutes=1), updated=NOW)
    for n in range(600)  # ten an hour over 60 h: three windows of 20 h, 200 records each
]
THREE_END = START + 60 * HOUR


def test_a_chain_carries_its_rest_into_the_unread_window_after_it_saving_a_partial_page():
    """200 records a window in pages of 6: 34 pages each, the last of 2 records.  Carried
    over, the two windows are 67 pages (400 records and the one of the carry's millisecond
    read again), one less than 68."""
    store = FakeStore()
    platform = FastPlatform(records=THREE)
    ctx = make_context(platform, store, page_size=6)
    first, second, third = split_range(START, THREE_END, 3)
    store.ensure_job("job", [first, second, third])
    snapshot = PendingWindows(store.windows("job"), workers=1)
    item = snapshot.take()
    assert item is not None
    assert item.window == first  # every other window first: the one after it is unread

    read_window(ctx, "job", item, ctx.runner(Stopper(), fatal_is_final=True), snapshot)

    assert store.calls.count("carry_window") == 1
    assert len(platform.calls_to("records_first", "records_next")) == 67
    windows = store.windows("job")
    assert_tiles([progress.window for progress in windows], START, THREE_END)
    cut, joined, unread = windows
    assert cut.window.start == first.start
    assert joined.window.end == second.end
    assert joined.window.end - joined.window.start <= MAX_WINDOW
    assert (cut.done, joined.done, unread.done) == (True, True, False)
    assert [queued.window for queued in snapshot.queue] == [third]
    assert set(store.rows) == {item.record_id for item in THREE if item.created_at < second.end}


def test_a_backfill_with_spare_windows_carries_and_reads_every_record() -> None:
    store = FakeStore()
    platform = FastPlatform(records=THREE)

    # One chain at most, so that none reads the second window before the first is carried.
    make_engine(
        platform, store, page_size=7, snapshot_concurrency=1, snapshot_most_chains=1
    ).backfill(START, THREE_END)

    windows = [item.window for item in store.windows(backfill_job(START, THREE_END))]
    assert store.calls.count("carry_window") == 1
    assert_tiles(windows, START, THREE_END)
    assert all(item.done for item in store.windows(backfill_job(START, THREE_END)))
    assert set(store.rows) == {item.record_id for item in THREE}
    assert max(item.end - item.start for item in windows) <= MAX_WINDOW


def test_no_carry_when_the_windows_left_are_no_more_than_the_chains_wanted():
    """Carrying takes an unread window away from the chains; with the round trip wanting
    every window in flight (3 s: seven chains), none is carried."""
    store = FakeStore()
    platform = SlowPlatform(records=THREE)

    make_engine(
        platform, store, page_size=7, snapshot_concurrency=1, snapshot_most_chains=1
    ).backfill(START, THREE_END)

    assert "carry_window" not in store.calls
    assert set(store.rows) == {item.record_id for item in THREE}


class KillAfterCarry(KillAfterSplit):
    """A kill -9 a few pages after a window was carried into the next."""

    def __init__(self, store: FakeStore, pages: int) -> None:
        super().__init__(pages)
        self.store = store

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        self.pages += 1
        if "carry_window" in self.store.calls and self.pages >= self.kill_at:
            raise RuntimeError("kill -9")


def test_a_carried_snapshot_killed_mid_way_resumes_to_every_record() -> None:
    store = FakeStore()
    platform = FastPlatform(records=THREE)
    crash = KillAfterCarry(store, pages=35)
    with pytest.raises(RuntimeError, match="kill -9"):
        make_engine(
            platform,
            store,
            page_size=7,
            snapshot_concurrency=1,
            snapshot_most_chains=1,
            observer=crash,
        ).backfill(START, THREE_END)
    job = backfill_job(START, THREE_END)
    assert any(not item.done for item in store.windows(job)), "the crash came before the end"
    assert_tiles([item.window for item in store.windows(job)], START, THREE_END)

    make_engine(
        platform, store, page_size=7, snapshot_concurrency=1, snapshot_most_chains=1
    ).backfill(START, THREE_END)

    assert_tiles([item.window for item in store.windows(job)], START, THREE_END)
    assert all(item.done for item in store.windows(job))
    assert set(store.rows) == {item.record_id for item in THREE}

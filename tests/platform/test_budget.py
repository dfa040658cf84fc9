"""The shared rate budget (spec: Limits, Record rate): never more than N starts per window."""

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.clocks import FakeClock

from recordsync.core.errors import ShutdownRequestedError
from recordsync.core.waiting import Deferred, no_waiting
from recordsync.platform.budget import UNSTAMPED_GRACE_SECONDS, Priority, RateBudget

EPSILON = 1e-9


def assert_within_limit(starts, requests, window):
    """No half-open interval of ``window`` seconds holds more than ``requests`` starts."""
    starts = sorted(starts)
    for first, last in zip(starts, starts[requests:], strict=False):
        assert last - first >= window - EPSILON, (first, last, window)


def test_first_requests_go_at_once_then_the_window_is_respected(fake_time):
    budget = RateBudget(2, 1.0, margin=0.03, clock=fake_time, sleep=fake_time.sleep)
    starts = []
    for _ in range(6):
        slot = budget.acquire()
        slot.stamp()
        starts.append(slot.started_at)
    assert starts[:2] == [1000.0, 1000.0]
    assert starts[2] == pytest.approx(1001.03)
    assert_within_limit(starts, 2, 1.03)
    assert budget.waited_seconds_total == pytest.approx(2 * 1.03)


def test_stamp_not_acquire_time_is_what_counts(fake_time):
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    slot = budget.acquire()
    fake_time.advance(0.4)  # time lost between acquire and send
    slot.stamp()
    nxt = budget.acquire()
    nxt.stamp()
    assert nxt.started_at - slot.started_at >= 1.0


def test_an_unstamped_slot_blocks_its_window_until_stamped(fake_time):
    unsent = []

    def sleep_then_stamp(seconds):  # the slot's owner sends while we wait
        fake_time.sleep(seconds)
        for slot in unsent:
            if not slot.stamped:
                slot.stamp()

    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=sleep_then_stamp)
    slot = budget.acquire()
    unsent.append(slot)
    fake_time.advance(1.5)  # long after acquire, still not sent (GIL, another thread...)
    nxt = budget.acquire()
    if not slot.stamped:
        slot.stamp()
    nxt.stamp()
    assert abs(nxt.started_at - slot.started_at) >= 1.0


def test_a_forgotten_slot_only_slows_the_budget(fake_time):
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    budget.acquire()  # never stamped nor cancelled
    slot = budget.acquire()
    assert slot.acquired_at == pytest.approx(1000.0 + UNSTAMPED_GRACE_SECONDS + 1.0)


def test_cancel_gives_the_slot_back(fake_time):
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    budget.acquire().cancel()
    budget.acquire().stamp()
    assert fake_time.sleeps == []


def test_cancel_after_stamp_keeps_the_start(fake_time):
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    slot = budget.acquire()
    slot.stamp()
    slot.cancel()
    budget.acquire().stamp()
    assert fake_time.sleeps == [1.0]


def test_stamping_twice_is_a_bug(fake_time):
    budget = RateBudget(1, 1.0, clock=fake_time, sleep=fake_time.sleep)
    slot = budget.acquire()
    slot.stamp()
    with pytest.raises(RuntimeError):
        slot.stamp()


def test_pause_blocks_the_next_caller_until_it_ends(fake_time):
    budget = RateBudget(10, 1.0, clock=fake_time, sleep=fake_time.sleep)
    budget.pause(7.5)
    budget.pause(2.0)  # a shorter pause never shortens a longer one
    slot = budget.acquire(Priority.TAIL)
    assert slot.acquired_at == pytest.approx(1007.5)


def test_resize_to_a_stricter_limit_applies_to_past_starts(fake_time):
    budget = RateBudget(5, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    starts = []
    for _ in range(3):
        slot = budget.acquire()
        slot.stamp()
        starts.append(slot.started_at)
    budget.resize(1, 2.0)
    assert (budget.requests, budget.seconds) == (1, 2.0)
    slot = budget.acquire()
    slot.stamp()
    assert slot.started_at - starts[-1] >= 2.0


def test_resize_to_a_longer_window_remembers_older_starts(fake_time):
    budget = RateBudget(2, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    for _ in range(2):
        budget.acquire().stamp()
    fake_time.advance(3.0)
    budget.resize(2, 10.0)
    slot = budget.acquire()
    assert slot.acquired_at == pytest.approx(1010.0)


@pytest.mark.parametrize(
    ("requests", "seconds", "margin"),
    [(0, 1.0, 0.0), (1, 0.0, 0.0), (1, float("inf"), 0.0), (1, 1.0, -0.1), (True, 1.0, 0.0)],
    ids=["zero-requests", "zero-seconds", "infinite-seconds", "negative-margin", "bool-requests"],
)
def test_invalid_limits_are_refused(requests, seconds, margin):
    with pytest.raises(ValueError):
        RateBudget(requests, seconds, margin=margin)


def test_shutdown_from_sleep_propagates_and_leaves_the_budget_usable(fake_time):
    stop = threading.Event()

    def sleep(seconds):
        if stop.is_set():
            raise ShutdownRequestedError("stop")
        fake_time.sleep(seconds)

    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=sleep)
    budget.acquire().stamp()
    stop.set()
    with pytest.raises(ShutdownRequestedError):
        budget.acquire(Priority.TAIL)
    assert budget.waiting == 0
    stop.clear()
    slot = budget.acquire()
    slot.stamp()
    assert slot.started_at == pytest.approx(1001.0)


# -- property: the rule holds for any sequence of acquisitions and pauses ------------------

operation = st.one_of(
    st.tuples(
        st.just("acquire"),
        st.sampled_from(list(Priority)),
        st.integers(0, 1500),  # ms between acquire and stamp
        st.booleans(),  # cancel instead of send
    ),
    st.tuples(st.just("pause"), st.integers(0, 5000)),  # ms
    st.tuples(st.just("idle"), st.integers(0, 3000)),  # ms
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=st.integers(1, 5),
    seconds_ms=st.integers(50, 3000),
    margin_ms=st.integers(0, 100),
    operations=st.lists(operation, max_size=60),
)
def test_property_no_window_ever_holds_more_than_the_limit(
    requests, seconds_ms, margin_ms, operations
):
    clock = FakeClock(0.0, zero_sleep=False)
    budget = RateBudget(
        requests, seconds_ms / 1000, margin=margin_ms / 1000, clock=clock, sleep=clock.sleep
    )
    starts = []
    pauses = []  # (paused at, paused until)
    for op in operations:
        if op[0] == "acquire":
            _, priority, send_delay_ms, cancel = op
            slot = budget.acquire(priority)
            for at, until in pauses:
                assert slot.acquired_at >= until - EPSILON or slot.acquired_at < at
            clock.now += send_delay_ms / 1000
            if cancel:
                slot.cancel()
            else:
                slot.stamp()
                starts.append(slot.started_at)
        elif op[0] == "pause":
            seconds = op[1] / 1000
            budget.pause(seconds)
            pauses.append((clock.now, clock.now + seconds))
        else:
            clock.now += op[1] / 1000
    assert_within_limit(starts, requests, (seconds_ms + margin_ms) / 1000)
    assert budget.waiting == 0


# -- threads ---------------------------------------------------------------------------------


def test_priorities_are_served_in_order_then_first_come_first_served(fake_time):
    everyone_waiting = threading.Event()

    def sleep(seconds):
        everyone_waiting.wait(timeout=10)
        fake_time.sleep(seconds)

    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=sleep)
    budget.acquire().stamp()  # the window is full: everyone below has to queue
    started = {}
    lock = threading.Lock()

    def worker(name, priority):
        slot = budget.acquire(priority)
        slot.stamp()
        with lock:
            started[name] = slot.started_at

    arrivals = [
        ("snapshot-1", Priority.SNAPSHOT),
        ("background", Priority.BACKGROUND),
        ("snapshot-2", Priority.SNAPSHOT),
        ("tail-1", Priority.TAIL),
        ("tail-2", Priority.TAIL),
    ]
    threads = []
    for count, (name, priority) in enumerate(arrivals, start=1):
        thread = threading.Thread(target=worker, args=(name, priority))
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 5
        while budget.waiting < count:  # arrivals in a known order
            assert time.monotonic() < deadline
            time.sleep(0.001)
    everyone_waiting.set()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    order = sorted(started, key=started.__getitem__)
    assert order == ["tail-1", "tail-2", "snapshot-1", "snapshot-2", "background"]
    assert_within_limit([1000.0, *started.values()], 1, 1.0)


def test_within_a_priority_the_highest_rank_goes_first(fake_time):
    """The snapshot ranks a chain's request by its pages left: most left, first served."""
    everyone_waiting = threading.Event()

    def sleep(seconds):
        everyone_waiting.wait(timeout=10)
        fake_time.sleep(seconds)

    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=sleep)
    budget.acquire().stamp()
    started = {}
    lock = threading.Lock()

    def worker(name, priority, rank):
        slot = budget.acquire(priority, rank=rank)
        slot.stamp()
        with lock:
            started[name] = slot.started_at

    arrivals = [
        ("chain-3-left", Priority.SNAPSHOT, 3.0),
        ("background", Priority.BACKGROUND, 1000.0),
        ("chain-5-left", Priority.SNAPSHOT, 5.0),
        ("chain-1-left", Priority.SNAPSHOT, 1.0),
        ("chain-5-left-later", Priority.SNAPSHOT, 5.0),
        ("tail", Priority.TAIL, 0.0),
        ("chain-unmeasured", Priority.SNAPSHOT, float("inf")),
    ]
    threads = []
    for count, arrival in enumerate(arrivals, start=1):
        thread = threading.Thread(target=worker, args=arrival)
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 5
        while budget.waiting < count:
            assert time.monotonic() < deadline
            time.sleep(0.001)
    everyone_waiting.set()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert sorted(started, key=started.__getitem__) == [
        "tail",
        "chain-unmeasured",
        "chain-5-left",
        "chain-5-left-later",
        "chain-3-left",
        "chain-1-left",
        "background",
    ]
    assert_within_limit([1000.0, *started.values()], 1, 1.0)


def test_a_rank_that_is_not_a_number_is_refused(fake_time):
    budget = RateBudget(1, 1.0, clock=fake_time, sleep=fake_time.sleep)
    with pytest.raises(ValueError, match="NaN"):
        budget.acquire(rank=float("nan"))
    assert budget.waiting == 0


def test_real_threads_never_exceed_the_limit():
    requests, seconds = 3, 0.1
    budget = RateBudget(requests, seconds, margin=0.01)
    starts = []
    lock = threading.Lock()

    def worker(priority):
        for _ in range(4):
            slot = budget.acquire(priority)
            slot.stamp()
            with lock:
                starts.append(slot.started_at)

    threads = [threading.Thread(target=worker, args=(Priority(i % 3),)) for i in range(6)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    elapsed = time.monotonic() - began
    assert len(starts) == 24
    assert_within_limit(starts, requests, seconds + 0.01)
    # 24 starts at 3 per 0.11 s need at least 7 full windows; and the budget is not idle.
    assert elapsed >= 7 * 0.11 - 0.01
    assert elapsed < 3.0
    assert budget.waiting == 0


def test_a_pause_from_one_thread_blocks_every_other_thread():
    budget = RateBudget(100, 1.0)
    budget.pause(0.3)
    began = time.monotonic()
    starts = []
    lock = threading.Lock()

    def worker():
        slot = budget.acquire(Priority.TAIL)
        slot.stamp()
        with lock:
            starts.append(slot.started_at)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(starts) == 4
    assert min(starts) - began >= 0.3 - 0.01


def test_a_cold_start_assumes_the_previous_window_was_spent(fake_time):
    budget = RateBudget(2, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep, cold_start=True)
    slot = budget.acquire()
    slot.stamp()
    assert slot.started_at == pytest.approx(1001.0)


def test_a_cold_start_grows_with_a_longer_window_from_capabilities(fake_time):
    budget = RateBudget(2, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep, cold_start=True)
    budget.resize(20, 10.0)
    first = budget.acquire()
    first.stamp()
    assert first.started_at == pytest.approx(1010.0)
    budget.resize(20, 30.0)  # requests went out already: no new pause
    second = budget.acquire()
    second.stamp()
    assert second.started_at == pytest.approx(1010.0)


# -- answers: a request had arrived by the time its answer came back ----------------------


def _send(budget, clock, *, answer_after=None):
    """Acquire, stamp and (optionally) take the answer ``answer_after`` seconds later."""
    slot = budget.acquire()
    slot.stamp()
    if answer_after is not None:
        clock.advance(answer_after)
        slot.answered()
    return slot


def test_a_quick_answer_lets_the_next_request_start_a_window_after_it(fake_time):
    budget = RateBudget(1, 1.0, margin=0.05, clock=fake_time, sleep=fake_time.sleep)
    first = _send(budget, fake_time, answer_after=0.01)
    second = _send(budget, fake_time)
    assert second.started_at == pytest.approx(first.started_at + 1.01)


def test_without_an_answer_the_margin_holds(fake_time):
    budget = RateBudget(1, 1.0, margin=0.05, clock=fake_time, sleep=fake_time.sleep)
    first = _send(budget, fake_time)
    second = _send(budget, fake_time)
    assert second.started_at == pytest.approx(first.started_at + 1.05)


def test_a_slow_answer_never_delays_beyond_the_margin(fake_time):
    budget = RateBudget(1, 1.0, margin=0.05, clock=fake_time, sleep=fake_time.sleep)
    first = _send(budget, fake_time, answer_after=0.5)
    second = _send(budget, fake_time)
    assert second.started_at == pytest.approx(first.started_at + 1.05)


def test_an_answer_coming_in_while_the_next_caller_waits_is_used(fake_time):
    """Two requests in flight; the third caller starts waiting before either is answered."""
    in_flight = []

    def sleep_and_answer(seconds):  # the answers come back while the third caller sleeps
        unanswered = [slot for slot in in_flight if slot.answered_at is None]
        if unanswered:
            fake_time.sleep(0.02)  # 20 ms after sending, a second into the wait
            seconds -= 0.02
            for slot in unanswered:
                slot.answered()
        fake_time.sleep(seconds)

    budget = RateBudget(2, 1.0, margin=0.05, clock=fake_time, sleep=sleep_and_answer)
    a, b = _send(budget, fake_time), _send(budget, fake_time)
    in_flight.extend((a, b))
    third = budget.acquire()
    third.stamp()
    assert third.started_at == pytest.approx(a.started_at + 1.02)


def test_answering_an_unsent_or_cancelled_slot_changes_nothing(fake_time):
    budget = RateBudget(1, 1.0, margin=0.05, clock=fake_time, sleep=fake_time.sleep)
    slot = budget.acquire()
    slot.answered()
    assert slot.answered_at is None
    slot.cancel()
    slot.answered()
    assert slot.answered_at is None


def assert_no_window_can_hold_more_arrivals(sent, requests, seconds):
    """``sent``: (start, latest arrival) per request.  Arrivals lie anywhere in between, so
    ``requests + 1`` of them fit in ``seconds`` only if some request, and ``requests`` others
    that started no later, could all still arrive within ``seconds`` before it started."""
    for start, _ in sent:
        could = [latest for other, latest in sent if other <= start and latest > start - seconds]
        assert len(could) <= requests, (start, could)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=st.integers(1, 4),
    seconds_ms=st.integers(50, 2000),
    margin_ms=st.integers(0, 100),
    round_trips_ms=st.lists(st.one_of(st.none(), st.integers(0, 300)), max_size=40),
)
def test_property_answers_never_let_more_arrivals_into_a_window(
    requests, seconds_ms, margin_ms, round_trips_ms
):
    """Sequential callers (each waits for its answer, or for none: a lost answer)."""
    clock = FakeClock(0.0, zero_sleep=False)
    margin = margin_ms / 1000
    budget = RateBudget(requests, seconds_ms / 1000, margin=margin, clock=clock, sleep=clock.sleep)
    sent = []
    for round_trip_ms in round_trips_ms:
        slot = budget.acquire()
        slot.stamp()
        latest = slot.started_at + margin
        if round_trip_ms is not None:
            clock.now += round_trip_ms / 1000
            slot.answered()
            latest = min(latest, slot.answered_at)
        sent.append((slot.started_at, latest))
    assert_no_window_can_hold_more_arrivals(sent, requests, seconds_ms / 1000 - EPSILON)


@pytest.mark.parametrize(
    ("since", "expected"),
    [
        # A process makes its budget after its imports (0.4 s here): the window it cannot
        # know about ends one window and the margin after the process started.
        (-0.4, 1.05 - 0.4),
        # Never later than now: a start in the future counts as now.
        (30.0, 1.05),
    ],
)
def test_a_cold_start_counts_from_the_moment_given(fake_time, since, expected):
    made = fake_time()
    budget = RateBudget(
        2,
        1.0,
        margin=0.05,
        clock=fake_time,
        sleep=fake_time.sleep,
        cold_start=True,
        cold_since=made + since,
    )
    slot = budget.acquire()
    slot.stamp()
    assert slot.started_at == pytest.approx(made + expected)


def test_a_caller_that_must_not_wait_still_waits_out_the_pacing(fake_time):
    """The budget's pacing is the work itself (at most a window): only a pause defers."""
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    budget.acquire().stamp()
    with no_waiting():
        slot = budget.acquire()
    assert slot.acquired_at == pytest.approx(1001.0)


def test_a_caller_that_must_not_wait_is_deferred_through_a_pause_and_leaves_no_trace(fake_time):
    budget = RateBudget(2, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    budget.pause(30)
    with no_waiting(), pytest.raises(Deferred) as deferred:
        budget.acquire(Priority.BACKGROUND)
    assert deferred.value.seconds == pytest.approx(30.0)
    assert budget.waiting == 0
    assert budget.acquire().acquired_at == pytest.approx(1030.0)  # anyone else waits it out


def test_a_cold_budget_defers_a_caller_that_must_not_wait_for_its_first_window(fake_time):
    budget = RateBudget(
        2, 1.0, margin=0.05, clock=fake_time, sleep=fake_time.sleep, cold_start=True
    )
    with no_waiting(), pytest.raises(Deferred) as deferred:
        budget.acquire()
    assert deferred.value.seconds == pytest.approx(1.05)


def test_background_work_that_must_not_wait_and_is_first_waits_out_the_pacing(fake_time):
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    budget.acquire().stamp()
    with no_waiting():
        slot = budget.acquire(Priority.BACKGROUND)
    assert slot.acquired_at == pytest.approx(1001.0)
    assert budget.deferred_total == 0


def test_background_work_that_must_not_wait_is_deferred_behind_the_snapshot_then_goes_first(
    fake_time,
):
    """Issue 38: a drift check on a shared thread behind a snapshot's chain gives its thread
    back at once; deferred for a window, it goes ahead of the chain that is still waiting."""
    release = threading.Event()

    def sleep(seconds):  # the snapshot's chain sleeps out its pacing until released
        if threading.current_thread().name == "chain":
            assert release.wait(timeout=10)
        fake_time.sleep(seconds)

    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=sleep)
    budget.acquire().stamp()
    started = {}

    def chain():
        slot = budget.acquire(Priority.SNAPSHOT)
        slot.stamp()
        started["chain"] = slot.started_at

    thread = threading.Thread(target=chain, name="chain")
    thread.start()
    deadline = time.monotonic() + 5
    while budget.waiting < 1:
        assert time.monotonic() < deadline
        time.sleep(0.001)

    with no_waiting(), pytest.raises(Deferred) as deferred:
        budget.acquire(Priority.BACKGROUND)
    assert deferred.value.seconds == pytest.approx(1.0)  # until it is due
    assert budget.waiting == 1  # the chain alone still waits
    assert fake_time() == 1000.0  # not a moment was waited in the caller's thread

    fake_time.advance(deferred.value.seconds)
    with no_waiting():
        slot = budget.acquire(Priority.BACKGROUND)
    slot.stamp()
    started["background"] = slot.started_at
    release.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert sorted(started, key=started.__getitem__) == ["background", "chain"]
    assert_within_limit([1000.0, *started.values()], 1, 1.0)
    assert budget.deferred_total == 1


def test_background_work_that_may_wait_still_queues_last(fake_time):
    """A verify in its own thread waits behind the snapshot as before; only the shared
    thread's caller is deferred."""
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    budget.acquire().stamp()
    slot = budget.acquire(Priority.BACKGROUND)
    assert slot.acquired_at == pytest.approx(1001.0)
    assert budget.deferred_total == 0

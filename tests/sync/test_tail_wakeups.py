"""Read-now requests for the tail (round-end notifications): one read at once when idle, one
more after a read in hand, and a burst costs one read, not one each."""

from __future__ import annotations

import threading
import time

from support.fakes import FakePlatform, FakeStore, make_context, make_engine, tailing_state

from recordsync.core.stopping import Stopper
from recordsync.sync.tail import Tail, TailWakeups, drain_tail


def test_a_request_wakes_an_idle_tail_and_asks_a_reading_one_for_one_more_read():
    wakeups = TailWakeups()
    assert wakeups.request() is True  # idle: wake the job
    wakeups.begin()
    wakeups.take()
    assert wakeups.request() is False  # reading: no second job
    assert wakeups.request() is False
    assert wakeups.end() is False  # read once more
    wakeups.take()
    assert wakeups.end() is True
    assert wakeups.request() is True


class NotifiedDuringRead(FakePlatform):
    """Round-end notifications arrive while the first read is on the wire."""

    def __init__(self, wakeups, burst):
        super().__init__()
        self.wakeups = wakeups
        self.burst = burst

    def changes(self, **kwargs):
        if len(self.calls_to("changes")) == 0:
            self.woken = [self.wakeups.request() for _ in range(self.burst)]
        return super().changes(**kwargs)


def test_a_burst_of_requests_during_a_read_causes_exactly_one_more_read():
    wakeups = TailWakeups()
    platform = NotifiedDuringRead(wakeups, burst=5)
    ctx = make_context(platform, FakeStore(state=tailing_state()))
    drain_tail(ctx, Tail("cursor"), Stopper(), threading.Event(), None, wakeups=wakeups)
    assert len(platform.calls_to("changes")) == 2
    assert platform.woken == [False] * 5  # none started a job of its own
    assert wakeups.request() is True  # idle again


def test_without_requests_a_drain_reads_once():
    wakeups = TailWakeups()
    platform = FakePlatform()
    ctx = make_context(platform, FakeStore(state=tailing_state()))
    drain_tail(ctx, Tail("cursor"), Stopper(), threading.Event(), None, wakeups=wakeups)
    assert len(platform.calls_to("changes")) == 1


def test_wake_tail_reads_at_once_though_the_poll_interval_is_long():
    platform = FakePlatform()
    stopper = Stopper()
    engine = make_engine(
        platform,
        FakeStore(state=tailing_state()),
        stopper=stopper,
        poll_interval=3600.0,
        stop_when_caught_up=False,
    )
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not platform.calls_to("changes") and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # the first drain is over
        assert len(platform.calls_to("changes")) == 1
        woken = time.monotonic()
        for _ in range(10):
            engine.wake_tail()
        while len(platform.calls_to("changes")) < 2 and time.monotonic() < woken + 5:
            time.sleep(0.005)
        assert time.monotonic() - woken < 5.0  # the poll is an hour away
        time.sleep(0.2)
        assert len(platform.calls_to("changes")) in {2, 3}  # a burst: one read, or two
    finally:
        stopper.stop()
        thread.join(5)

"""The adaptive tail: its rules alone (``TailPacing``), then the tail's own loop
(``follow_tail``) on a scripted platform and a scripted clock: the times it reads at while
the stream is quiet or flowing, a snapshot runs or not, and notifications come or not.

The loop's clock and its waits are the test's: each wait moves the clock on to its end, or
to the next notification or snapshot change within it (which would end a real wait), so a
scenario of minutes runs in milliseconds and every read time is exact."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from support.fakes import HOUR, NOW, FakePlatform, FakeStore, make_context, record, tailing_state
from support.warehouse_samples import make_change

from recordsync.core.models import ChangesPage
from recordsync.core.state import Window, WindowProgress
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.demand import SnapshotDemand
from recordsync.sync.snapshot.pending_windows import PendingWindows
from recordsync.sync.tail import Tail, TailWakeups, follow_tail
from recordsync.sync.tail_pace import TailPacing

PACING = TailPacing(interval=1.0, ceiling=10.0, safety=None, snapshot_spacing=5.0)
NOTIFIED = TailPacing(interval=1.0, ceiling=10.0, safety=10.0, snapshot_spacing=5.0)

# -- the rules ---------------------------------------------------------------------------


def stretch(pacing: TailPacing, reads: int, *, snapshot: bool) -> list[float]:
    """The waits after ``reads`` empty pages in a row, from the interval."""
    waits, wait = [], pacing.interval
    for _ in range(reads):
        wait = pacing.after(wait, changes=False, snapshot=snapshot)
        waits.append(wait)
    return waits


def test_empty_pages_stretch_the_wait_to_the_ceiling_while_a_snapshot_runs():
    assert stretch(PACING, 6, snapshot=True) == [2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_without_a_snapshot_or_notifications_an_idle_tail_keeps_its_interval():
    assert stretch(PACING, 4, snapshot=False) == [1.0, 1.0, 1.0, 1.0]


def test_with_notifications_an_idle_tail_stretches_to_its_safety_poll():
    assert stretch(NOTIFIED, 6, snapshot=False) == [2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert stretch(NOTIFIED, 6, snapshot=True)[-1] == 10.0


def test_changes_snap_the_wait_back_to_the_interval():
    assert PACING.after(10.0, changes=True, snapshot=True) == 1.0
    assert PACING.after(10.0, changes=True, snapshot=False) == 1.0
    assert NOTIFIED.after(10.0, changes=True, snapshot=False) == 1.0


def test_with_notifications_during_a_snapshot_flowing_changes_are_read_at_the_spacing():
    assert NOTIFIED.after(10.0, changes=True, snapshot=True) == 5.0
    assert NOTIFIED.after(5.0, changes=False, snapshot=True) == 10.0


def test_wake_ups_are_spaced_only_during_a_snapshot_with_notifications():
    assert NOTIFIED.wake_spacing(snapshot=True) == 5.0
    assert NOTIFIED.wake_spacing(snapshot=False) == 0.0
    assert PACING.wake_spacing(snapshot=True) == 0.0


def test_no_wait_is_ever_shorter_than_the_interval():
    slow = TailPacing(interval=20.0, ceiling=10.0, safety=10.0, snapshot_spacing=5.0)
    for snapshot in (False, True):
        for changes in (False, True):
            assert slow.after(20.0, changes=changes, snapshot=snapshot) == 20.0


@pytest.mark.parametrize(
    "values",
    [
        {"interval": 0.0},
        {"ceiling": -1.0},
        {"snapshot_spacing": float("inf")},
        {"safety": float("nan")},
        {"safety": 0.0},
    ],
)
def test_a_wait_that_is_not_a_positive_finite_number_is_refused(values):
    with pytest.raises(ValueError, match="seconds > 0"):
        TailPacing(**values)


# -- the loop ----------------------------------------------------------------------------


@dataclass
class Scenario:
    """The scripted world: when changes flow, when a snapshot runs, when notifications come,
    and when it ends."""

    end: float
    flowing: Callable[[float], bool] = lambda _t: False
    snapshot_until: float = 0.0
    notifications: list[float] = field(default_factory=list)
    now: float = 0.0

    def clock(self) -> float:
        return self.now


class ScriptedWakeups(TailWakeups):
    """Waits on the scenario's clock: a wait ends at its end, or at the first notification
    or snapshot change within it, as it would in real time."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__()
        self.scenario = scenario

    def wait(self, seconds: float, stopper: Stopper, *, since: int) -> None:
        scenario = self.scenario
        target = scenario.now + max(seconds, 0.0)
        events = [t for t in scenario.notifications if t <= target]
        if scenario.now < scenario.snapshot_until <= target:
            events.append(scenario.snapshot_until)
        if events:
            at = min(events)
            scenario.now = max(scenario.now, at)
            if at in scenario.notifications:
                scenario.notifications.remove(at)
                self.request()
            else:
                self.nudge()
        else:
            scenario.now = target
        if scenario.now >= scenario.end:
            stopper.stop()


class ScriptedStream(FakePlatform):
    """Change pages by the scenario's clock: one change while it flows, else an empty page."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__()
        self.scenario = scenario
        self.reads: list[float] = []
        self.sequence = 0

    def changes(self, *, cursor=None, since=None, from_now=False, limit=1000, priority=None):
        assert cursor is not None
        assert priority is Priority.TAIL
        now = self.scenario.now
        self.reads.append(now)
        if not self.scenario.flowing(now):
            return ChangesPage([], [], next_cursor=cursor, has_more=False, projection_as_of=NOW)
        self.sequence += 1
        item = record(f"r{self.sequence}", created=NOW, updated=NOW)
        return ChangesPage(
            [make_change(item, self.sequence)],
            [],
            next_cursor=f"c{self.sequence}",
            has_more=False,
            projection_as_of=NOW,
        )


@dataclass
class Job:
    """A snapshot job as the demand sees it, running until the scenario says so."""

    scenario: Scenario

    @property
    def wants_budget(self) -> bool:
        return self.scenario.now < self.scenario.snapshot_until


def follow(scenario: Scenario, pacing: TailPacing) -> list[float]:
    """The times the tail read at, from 0 until the scenario ends."""
    platform = ScriptedStream(scenario)
    stopper = Stopper()
    ctx = make_context(
        platform, FakeStore(state=tailing_state()), tail_pacing=pacing, stop_when_caught_up=False
    )
    wakeups = ScriptedWakeups(scenario)
    if scenario.snapshot_until > 0:
        ctx.demand.add(Job(scenario))
    stopper.adopt(wakeups)
    with ctx.demand.listening(wakeups.nudge):
        follow_tail(
            ctx, Tail("c0"), stopper, threading.Event(), None, wakeups=wakeups, clock=scenario.clock
        )
    return platform.reads


def gaps(reads: list[float]) -> list[float]:
    return [round(later - earlier, 6) for earlier, later in itertools.pairwise(reads)]


def test_a_quiet_stream_is_read_every_interval_when_nothing_else_wants_the_budget():
    reads = follow(Scenario(end=10.0), PACING)
    assert reads == [float(second) for second in range(10)]


def test_a_quiet_stream_stretches_to_the_ceiling_during_a_snapshot_and_snaps_back_at_its_end():
    reads = follow(Scenario(end=70.0, snapshot_until=60.0), PACING)
    during = [t for t in reads if t < 60.0]
    assert during == [0.0, 2.0, 6.0, 14.0, 24.0, 34.0, 44.0, 54.0]
    # The snapshot's end is heard at once: the next read is then, not at 65.
    after = [t for t in reads if t >= 60.0]
    assert after[:3] == [60.0, 61.0, 62.0]
    assert gaps(after) == [1.0] * (len(after) - 1)


def test_changes_during_a_snapshot_snap_the_tail_back_to_its_interval_without_notifications():
    scenario = Scenario(end=60.0, snapshot_until=60.0, flowing=lambda t: 30.0 <= t < 40.0)
    reads = follow(scenario, PACING)
    flowing = [t for t in reads if 30.0 <= t < 40.0]
    # The first change waits at most the ceiling; then every interval while changes flow.
    assert flowing[0] - 30.0 <= PACING.ceiling
    assert gaps(flowing) == [1.0] * (len(flowing) - 1)
    # Once they stop, the waits stretch again.
    assert gaps([t for t in reads if t >= 40.0])[:3] == [2.0, 4.0, 8.0]


def test_notifications_wake_an_idle_tail_at_once_when_no_snapshot_runs():
    scenario = Scenario(end=60.0, notifications=[20.5, 33.25, 47.0])
    reads = follow(scenario, NOTIFIED)
    for notified in (20.5, 33.25, 47.0):
        assert notified in reads
    # Between them the idle tail only polls for safety: no gap over the safety poll.
    assert max(gaps(reads)) <= NOTIFIED.longest(snapshot=False)
    assert len(reads) < 20


def test_during_a_snapshot_notifications_are_coalesced_into_one_read_per_spacing():
    """Five notifications a second and changes flowing throughout a 100 s snapshot: the tail
    reads once every 5 s, so the snapshot keeps at least 0.9 of a 2-a-second budget, and
    every notification is served within the spacing."""
    notifications = [n / 5 for n in range(1, 500)]
    scenario = Scenario(
        end=100.0,
        snapshot_until=1000.0,
        flowing=lambda _t: True,
        notifications=list(notifications),
    )
    reads = follow(scenario, NOTIFIED)
    assert min(gaps(reads)) >= 5.0
    budget = 2 * 100.0
    assert len(reads) <= 20
    assert 1 - len(reads) / budget >= 0.9
    for notified in (n for n in notifications if n <= reads[-1]):
        served = next(t for t in reads if t >= notified)
        assert served - notified <= 5.0


def test_without_notifications_a_flowing_stream_keeps_its_interval_during_a_snapshot():
    """The trade-off, stated: with no notification to wake it, freshness wins."""
    scenario = Scenario(end=20.0, snapshot_until=100.0, flowing=lambda _t: True)
    reads = follow(scenario, PACING)
    assert gaps(reads) == [1.0] * (len(reads) - 1)


def test_later_revisions_that_no_notification_announces_arrive_within_the_safety_poll():
    """Changes (later revisions) from 12 s on, no notification: read within 10 s."""
    scenario = Scenario(end=60.0, flowing=lambda t: t >= 12.0)
    reads = follow(scenario, NOTIFIED)
    first = next(t for t in reads if t >= 12.0)
    assert first - 12.0 <= NOTIFIED.longest(snapshot=False)
    assert gaps([t for t in reads if t >= first]) == [1.0] * (
        len([t for t in reads if t >= first]) - 1
    )


# -- the demand --------------------------------------------------------------------------


def one_window_job(stopper: Stopper) -> PendingWindows:
    window = Window(NOW - HOUR, NOW)
    job = PendingWindows([WindowProgress("m", "j", window, None, None, done=False, records=0)], 1)
    job.stopper = stopper
    return job


def test_a_snapshot_wants_the_budget_until_its_last_worker_ends_and_says_so():
    demand = SnapshotDemand()
    told = []
    job = one_window_job(Stopper())
    job.on_end = demand.changed
    job.start()
    with demand.listening(lambda: told.append(demand.running)):
        demand.add(job)
        assert demand.running
        assert job.take() is not None
        job.window_finished()
        assert demand.running
        assert job.take() is None
        assert not demand.running
    assert told == [True, False]  # added, then ended: the tail looks again both times
    demand.changed()
    assert told == [True, False]  # a listener whose block ended is told nothing more


def test_a_stopped_job_never_holds_the_tail_stretched():
    demand = SnapshotDemand()
    stopper = Stopper()
    job = one_window_job(stopper)
    job.start()
    demand.add(job)
    assert demand.running
    stopper.stop()  # its workers never ran
    assert not demand.running

"""The change tail: every page committed with its cursor, read on while there is a backlog."""

from __future__ import annotations

import threading
import time

import pytest
from support.fakes import (
    HOUR,
    NOW,
    FakePlatform,
    FakeStore,
    InstantStopper,
    RecordingObserver,
    TailCommit,
    expired,
    make_context,
    make_engine,
    record,
    tailing_state,
)

from recordsync.core.errors import ProjectionLagError, ServerError, WarehouseUnavailableError
from recordsync.core.state import REBUILD_JOB, Phase
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.tail import Tail, drain_tail, tail_step

CHANGED = [record(f"c{n}", 2, created=NOW - 5 * HOUR, updated=NOW - HOUR) for n in range(3)]


def with_backlog(platform: FakePlatform, cursor: str = "saved-cursor") -> FakePlatform:
    """Two pages of changes behind ``cursor`` (the second ends at ``c3``), then nothing."""
    platform.add_changes(cursor, CHANGED[:2], next_cursor="c2", has_more=True)
    platform.add_changes("c2", CHANGED[2:], next_cursor="c3", has_more=False)
    return platform


def test_the_tail_commits_each_page_with_its_next_cursor_and_reads_on_while_has_more():
    platform = with_backlog(FakePlatform())
    store = FakeStore(state=tailing_state())

    # A poll interval far longer than the test: the second page must come in the same drain.
    assert make_engine(platform, store, poll_interval=60.0).run() is True

    assert store.tail_commits == [
        TailCommit(position="saved-cursor", next_cursor="c2", record_ids=["c0", "c1"]),
        TailCommit(position="c2", next_cursor="c3", record_ids=["c2"]),
    ]
    assert [call.at for call in platform.calls_to("changes")] == ["saved-cursor", "c2"]
    assert {call.priority for call in platform.calls_to("changes")} == {Priority.TAIL}
    assert store.state is not None
    assert store.state.change_cursor == "c3"
    assert store.state.last_projection_as_of == NOW
    assert set(store.rows) == {"c0", "c1", "c2"}


def test_run_returns_false_on_a_stop_from_outside():
    class StopOnFirstTailPage(RecordingObserver):
        def tail_page(self, changes, *, has_more, projection_as_of, last_sequence):
            stopper.stop()

    stopper = Stopper()
    store = FakeStore(state=tailing_state())

    engine = make_engine(
        FakePlatform(),
        store,
        stopper=stopper,
        observer=StopOnFirstTailPage(),
        stop_when_caught_up=False,
    )
    assert engine.run() is False
    assert len(store.tail_commits) >= 1


def finished() -> threading.Event:
    done = threading.Event()
    done.set()
    return done


@pytest.mark.parametrize(
    ("stop_when_caught_up", "snapshot_done", "caught_up"),
    [
        (True, None, True),
        (True, finished(), True),
        (True, threading.Event(), False),
        (False, None, False),
    ],
    ids=[
        "no snapshot to wait for",
        "snapshot done",
        "snapshot still running",
        "daemon: never stops by itself",
    ],
)
def test_a_drained_tail_stops_the_engine_only_once_caught_up_with_the_snapshot_done(
    stop_when_caught_up, snapshot_done, caught_up
):
    store = FakeStore(state=tailing_state())
    ctx = make_context(with_backlog(FakePlatform()), store, stop_when_caught_up=stop_when_caught_up)
    generation = Stopper(parent=ctx.stopper)

    drain_tail(ctx, Tail("saved-cursor"), generation, threading.Event(), snapshot_done)

    assert len(store.tail_commits) == 2  # the whole backlog first, whatever the outcome
    assert ctx.caught_up.is_set() is caught_up
    assert ctx.stopper.stopped is caught_up


def test_an_expired_change_cursor_ends_the_generation_and_asks_for_a_rebuild():
    platform = FakePlatform()
    platform.fail("changes", "saved-cursor", expired("record-changes"))
    store = FakeStore(state=tailing_state())
    ctx = make_context(platform, store)
    generation = Stopper(parent=ctx.stopper)
    rebuild = threading.Event()
    tail = Tail("saved-cursor")

    drain_tail(ctx, tail, generation, rebuild, None)

    assert rebuild.is_set()
    assert generation.stopped
    assert not ctx.stopper.stopped  # the engine goes on, with a new anchor
    assert not ctx.caught_up.is_set()
    assert store.tail_commits == []
    assert tail.position == "saved-cursor"


def platform_5xx(platform: FakePlatform, store: FakeStore) -> None:
    platform.fail("changes", "saved-cursor", ServerError("boom", endpoint="record-changes"))


def projection_lag(platform: FakePlatform, store: FakeStore) -> None:
    lag = ProjectionLagError("lagging", endpoint="record-changes", status=503)
    platform.fail("changes", "saved-cursor", lag)


def warehouse_down(platform: FakePlatform, store: FakeStore) -> None:
    store.fail("commit_tail_page", WarehouseUnavailableError("server gone"))


@pytest.mark.parametrize(
    ("break_once", "kind"),
    [
        (platform_5xx, "ServerError"),
        (projection_lag, "ProjectionLagError"),
        (warehouse_down, "WarehouseUnavailableError"),
    ],
    ids=["platform 5xx", "projection lag 503", "warehouse down on the commit"],
)
def test_a_retryable_failure_of_a_tail_page_is_retried_from_the_same_cursor(break_once, kind):
    platform = FakePlatform()
    platform.add_changes("saved-cursor", CHANGED, next_cursor="c3", has_more=False)
    store = FakeStore(state=tailing_state())
    break_once(platform, store)
    observer = RecordingObserver()
    ctx = make_context(platform, store, observer=observer, stop_when_caught_up=False)
    stopper = InstantStopper()
    tail = Tail("saved-cursor")

    drain_tail(ctx, tail, stopper, threading.Event(), None)

    assert observer.errors == [kind]
    assert len(stopper.slept) == 1
    # The cursor moves only with a committed page: the retry reads the same page again.
    assert [call.at for call in platform.calls_to("changes")] == ["saved-cursor"] * 2
    assert store.tail_commits == [TailCommit("saved-cursor", "c3", ["c0", "c1", "c2"])]
    assert tail.position == "c3"


def test_run_returns_true_once_the_snapshot_is_done_and_the_tail_has_no_backlog():
    rows = [record(f"s{n}", created=NOW - (n + 1) * 5 * HOUR, updated=NOW) for n in range(5)]
    platform = with_backlog(FakePlatform(records=rows), "anchor-1")
    store = FakeStore()
    observer = RecordingObserver()

    assert make_engine(platform, store, observer=observer).run() is True

    assert all(item.done for item in store.windows(REBUILD_JOB))
    assert [(commit.position, commit.next_cursor) for commit in store.tail_commits[:2]] == [
        ("anchor-1", "c2"),
        ("c2", "c3"),
    ]
    # Polls while the snapshot was still running found no backlog: empty pages at c3.
    assert all(commit.record_ids == [] for commit in store.tail_commits[2:])
    assert store.state is not None
    assert store.state.phase is Phase.TAILING
    assert store.state.change_cursor == "c3"
    assert observer.phases[-1] == "tailing"
    assert set(store.rows) == {item.record_id for item in rows + CHANGED}


class PollRecorder(RecordingObserver):
    def __init__(self) -> None:
        super().__init__()
        self.polled: list[object] = []
        self.pages = 0

    def tail_polled(self, *, has_more, projection_as_of):
        self.polled.append(projection_as_of)

    def tail_page(self, changes, *, has_more, projection_as_of, last_sequence):
        self.pages += 1


def idle_step(
    platform: FakePlatform, tail: Tail, **changes: object
) -> tuple[FakeStore, PollRecorder]:
    store = FakeStore(state=tailing_state())
    observer = PollRecorder()
    ctx = make_context(platform, store, observer=observer, **changes)
    tail_step(ctx, tail, Stopper(parent=ctx.stopper), threading.Event())
    return store, observer


def test_an_idle_poll_soon_after_a_commit_stores_nothing_and_reports_the_poll():
    """Fifty idle merchants in one process: no transaction for a page with nothing in it."""
    tail = Tail("c3", committed_at=time.monotonic())

    store, observer = idle_step(FakePlatform(), tail, idle_commit_interval=60.0)

    assert store.tail_commits == []
    assert observer.pages == 0
    assert observer.polled == [NOW]  # freshness still moves: nothing after NOW is missing
    assert tail.position == "c3"


def test_an_idle_tail_still_commits_once_per_idle_commit_interval_and_at_its_start():
    for committed_at in (None, time.monotonic() - 61.0):
        tail = Tail("c3", committed_at=committed_at)

        store, observer = idle_step(FakePlatform(), tail, idle_commit_interval=60.0)

        assert store.tail_commits == [TailCommit(position="c3", next_cursor="c3", record_ids=[])]
        assert observer.pages == 1
        assert tail.committed_at is not None
        assert time.monotonic() - tail.committed_at < 5.0


def test_an_empty_page_with_a_new_cursor_is_committed_at_once():
    platform = FakePlatform()
    platform.add_changes("c3", [], next_cursor="c4", has_more=False)
    tail = Tail("c3", committed_at=time.monotonic())

    store, _ = idle_step(platform, tail, idle_commit_interval=60.0)

    assert store.tail_commits == [TailCommit(position="c3", next_cursor="c4", record_ids=[])]
    assert tail.position == "c4"

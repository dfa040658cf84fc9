"""The change tail: every page committed with its cursor, read on while there is a backlog."""

from __future__ import annotations

from sync.fakes import (
    HOUR,
    NOW,
    FakePlatform,
    FakeStore,
    RecordingObserver,
    TailCommit,
    make_engine,
    record,
    tailing_state,
)

from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority

CHANGED = [record(f"c{n}", 2, created=NOW - 5 * HOUR, updated=NOW - HOUR) for n in range(3)]


def test_the_tail_commits_each_page_with_its_next_cursor_and_reads_on_while_has_more():
    platform = FakePlatform()
    platform.add_changes("saved-cursor", CHANGED[:2], next_cursor="c2", has_more=True)
    platform.add_changes("c2", CHANGED[2:], next_cursor="c3", has_more=False)
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

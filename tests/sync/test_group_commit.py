"""Group commits: pages waiting for the one writer share a transaction; none waits for a group
to fill, a failure is reported to its own page, and the other pages of its group still land."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from support.fakes import FakePlatform, FakeStore, make_context

from recordsync.core.state import REBUILD_JOB, Window, WindowPage
from recordsync.sync.group_commit import GroupCommits

TIMEOUT = 10.0


class Transactions:
    """``commit_many`` that records each transaction; the first can be held open until
    ``release`` is set, so that other items queue behind it."""

    def __init__(self, *, hold_first: bool = False, failing: Sequence[str] = ()) -> None:
        self.groups: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.hold_first = hold_first
        self.failing = set(failing)
        self.lock = threading.Lock()

    def __call__(self, items: Sequence[str]) -> list[str]:
        with self.lock:
            first = not self.groups
            self.groups.append(list(items))
        if first and self.hold_first:
            self.entered.set()
            assert self.release.wait(TIMEOUT)
        bad = self.failing.intersection(items)
        if bad:
            raise ValueError(f"cannot store {sorted(bad)}")
        return [f"stored {item}" for item in items]


def committing(commits: GroupCommits[str, str], item: str, outcomes: dict[str, object]) -> None:
    try:
        outcomes[item] = commits.commit(item).result
    except ValueError as error:
        outcomes[item] = str(error)


def queue_behind_a_held_commit(
    commits: GroupCommits[str, str], transactions: Transactions, items: Sequence[str]
) -> dict[str, object]:
    """Commit "a" and hold it open; queue ``items`` one after the other (so their order is
    known) behind it; release it; wait for every item's outcome."""
    outcomes: dict[str, object] = {}
    threads = [threading.Thread(target=committing, args=(commits, "a", outcomes))]
    threads[0].start()
    assert transactions.entered.wait(TIMEOUT)
    for number, item in enumerate(items, start=1):
        thread = threading.Thread(target=committing, args=(commits, item, outcomes))
        thread.start()
        threads.append(thread)
        wait_queued(commits, number)
    transactions.release.set()
    for thread in threads:
        thread.join(TIMEOUT)
    return outcomes


def wait_queued(commits: GroupCommits[str, str], count: int) -> None:
    pause = threading.Event()
    for _ in range(1000):
        if commits.waiting() >= count:
            return
        pause.wait(0.01)
    pytest.fail(f"{count} items never queued")


def test_an_item_that_finds_the_writer_free_commits_alone_at_once() -> None:
    transactions = Transactions()
    commits = GroupCommits(transactions, writer=threading.Lock())
    committed = commits.commit("a")
    assert committed.result == "stored a"
    assert committed.group == 1
    assert transactions.groups == [["a"]]


def test_items_waiting_for_the_writer_share_one_transaction_in_arrival_order() -> None:
    transactions = Transactions(hold_first=True)
    commits = GroupCommits(transactions, writer=threading.Lock())
    outcomes = queue_behind_a_held_commit(commits, transactions, ["b", "c", "d"])
    assert transactions.groups == [["a"], ["b", "c", "d"]]
    assert outcomes == {item: f"stored {item}" for item in "abcd"}


def test_a_group_takes_at_most_most_items() -> None:
    transactions = Transactions(hold_first=True)
    commits = GroupCommits(transactions, writer=threading.Lock(), most=2)
    outcomes = queue_behind_a_held_commit(commits, transactions, ["b", "c", "d", "e", "f"])
    assert len(outcomes) == 6
    assert transactions.groups == [["a"], ["b", "c"], ["d", "e"], ["f"]]


def test_a_failed_group_commits_each_item_alone_and_the_error_reaches_its_own_item() -> None:
    transactions = Transactions(hold_first=True, failing=["c"])
    commits = GroupCommits(transactions, writer=threading.Lock())
    outcomes = queue_behind_a_held_commit(commits, transactions, ["b", "c", "d"])
    assert transactions.groups == [["a"], ["b", "c", "d"], ["b"], ["c"], ["d"]]
    assert {item: str(outcome) for item, outcome in outcomes.items()} == {
        "a": "stored a",
        "b": "stored b",
        "c": "cannot store ['c']",
        "d": "stored d",
    }


def test_the_writer_is_held_for_each_transaction() -> None:
    writer = threading.Lock()
    seen: list[bool] = []

    def commit_many(items: Sequence[str]) -> list[str]:
        seen.append(writer.locked())
        return list(items)

    commits = GroupCommits(commit_many, writer=writer)
    commits.commit("a")
    assert seen == [True]
    assert not writer.locked()


def test_a_wrong_number_of_results_is_an_error_not_a_silent_loss() -> None:
    commits = GroupCommits(lambda items: [], writer=threading.Lock())
    with pytest.raises(RuntimeError, match="1 items committed, 0 results"):
        commits.commit("a")


# -- the engine's use: grouped only where commits wait for one writer -------------------------


class MeetingStore(FakeStore):
    """Each page commit waits, up to a few seconds, until ``meeting`` commits are inside."""

    def __init__(self, *, concurrent_writes: bool, meeting: int) -> None:
        super().__init__(concurrent_writes=concurrent_writes)
        self.barrier = threading.Barrier(meeting, timeout=2.0)
        self.met = 0

    def commit_window_pages(self, pages: Sequence[WindowPage]) -> list[None]:
        try:
            self.barrier.wait()
            self.met += 1
        except threading.BrokenBarrierError:
            pass
        return [None] * len(pages)


def page_of(number: int) -> WindowPage:
    window = Window(
        datetime(2026, 1, number, tzinfo=UTC), datetime(2026, 1, number + 1, tzinfo=UTC)
    )
    return WindowPage(REBUILD_JOB, window, [], [], None, None, True, f"page-{number}")


def commit_side_by_side(store: MeetingStore) -> None:
    context = make_context(FakePlatform(), store)
    threads = [
        threading.Thread(target=context.commit_window_page, args=[page_of(number)])
        for number in (1, 2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)


def test_a_warehouse_that_takes_commits_side_by_side_gets_them_side_by_side() -> None:
    """PostgreSQL and MariaDB: two chains' pages are in their transactions at once."""
    store = MeetingStore(concurrent_writes=True, meeting=2)
    commit_side_by_side(store)
    assert store.met == 2


def test_a_one_writer_warehouse_gets_one_commit_at_a_time() -> None:
    """SQLite: the second page waits for the first (and may join a group), never beside it."""
    store = MeetingStore(concurrent_writes=False, meeting=2)
    commit_side_by_side(store)
    assert store.met == 0

"""Group commits: snapshot pages that wait for the one writer commit together.

A warehouse that takes one writer at a time (SQLite: ``SyncStore.concurrent_writes`` is false)
pays most of a page's commit per transaction, not per row: SQLite writes every B-tree page a
transaction touched to the WAL once per commit, and the random keys of ``records`` and
``record_revisions`` touch a different leaf for almost every row.  Pages of the same transaction
share those leaves, so the same rows cost less together (``bench/ingest.py``).  When the writer
is the bottleneck, pages of several chains wait for it anyway: the first to find the writer free
becomes the *leader* and commits, in one transaction, every page queued by then (each with its
own window's cursor, so invariant 1 holds page by page); the others wait for the leader's
word.  A page that finds the writer free commits alone at once: nothing waits for a group to
fill.

If a group's transaction fails, each of its pages is committed alone, so that a failure is
reported to the chain whose page caused it and the other pages still land.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Enough to share most leaves, few enough that one transaction stays short for a reader.
MOST_PAGES_PER_GROUP: Final = 16


@dataclass(frozen=True, slots=True)
class Committed(Generic[Result]):
    """A page's result, with the seconds its transaction took (its group's, when grouped)."""

    result: Result
    seconds: float
    group: int


@dataclass(eq=False, slots=True)
class _Slot(Generic[Item, Result]):
    item: Item
    done: bool = False
    committed: Committed[Result] | None = None
    error: BaseException | None = None


@dataclass(eq=False)
class GroupCommits(Generic[Item, Result]):
    """Commits items through ``commit_many`` (one transaction for all the items it is given,
    results in their order), under ``writer``, grouping the items that wait.

    ``most``: the most items one transaction takes; 1 commits every item alone.
    """

    commit_many: Callable[[Sequence[Item]], Sequence[Result]]
    writer: AbstractContextManager[Any]
    most: int = MOST_PAGES_PER_GROUP
    clock: Callable[[], float] = time.perf_counter
    _queue: list[_Slot[Item, Result]] = field(init=False, default_factory=list)
    _leading: bool = field(init=False, default=False)
    _turn: threading.Condition = field(init=False, default_factory=threading.Condition)

    def commit(self, item: Item) -> Committed[Result]:
        """Commit ``item``, alone or with the items waiting beside it; raise its error."""
        slot: _Slot[Item, Result] = _Slot(item)
        with self._turn:
            self._queue.append(slot)
        while True:
            with self._turn:
                while self._leading and not slot.done:
                    self._turn.wait()
                if slot.done:
                    break
                self._leading = True
                group, self._queue = self._queue[: self.most], self._queue[self.most :]
            try:
                self._commit(group)
            finally:
                with self._turn:
                    self._leading = False
                    self._turn.notify_all()
        if slot.error is not None:
            raise slot.error
        assert slot.committed is not None  # done without an error
        return slot.committed

    def waiting(self) -> int:
        """Items queued and not yet taken into a transaction."""
        with self._turn:
            return len(self._queue)

    def _commit(self, group: list[_Slot[Item, Result]]) -> None:
        """Commit ``group`` in one transaction; after a failure, each of its items alone."""
        try:
            self._transaction(group)
        except BaseException as error:  # noqa: BLE001 - handed to the item's own thread
            if len(group) == 1:
                group[0].error = error
            else:
                for slot in group:
                    try:
                        self._transaction([slot])
                    except BaseException as alone:  # noqa: BLE001 - as above
                        slot.error = alone
        for slot in group:
            slot.done = True

    def _transaction(self, group: list[_Slot[Item, Result]]) -> None:
        with self.writer:
            started = self.clock()
            results = self.commit_many([slot.item for slot in group])
            seconds = self.clock() - started
        if len(results) != len(group):
            raise RuntimeError(f"{len(group)} items committed, {len(results)} results")
        for slot, result in zip(group, results, strict=True):
            slot.committed = Committed(result, seconds, len(group))

"""The revision retention job: a run works through batches for a bounded time and gives its
thread back; the next run goes on where it stopped; a finished sweep waits for the next."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from support.clocks import FakeClock
from support.fakes import FakePlatform, FakeStore, make_context

from recordsync.core.retention import PrunedBatch, RevisionKey
from recordsync.core.stopping import Stopper
from recordsync.sync.events import SyncObserver
from recordsync.sync.revision_retention import RUN_SECONDS, SWEEP_SECONDS, RevisionRetention

RETENTION = timedelta(days=30)


@dataclass
class SweptStore(FakeStore):
    """A table of ``batches`` batches, each deleting 2 rows and taking ``seconds`` of the
    clock; ``asked`` records where each batch started."""

    batches: int = 5
    seconds: float = 0.4
    clock: FakeClock[float] = field(default_factory=lambda: FakeClock(1000.0))
    asked: list[RevisionKey | None] = field(default_factory=list)

    def prune_revisions(self, after: RevisionKey | None, retention: timedelta) -> PrunedBatch:
        assert retention == RETENTION
        self.asked.append(after)
        self.clock.now += self.seconds
        number = 0 if after is None else int(after.record_id) + 1
        last = None if number == self.batches - 1 else RevisionKey(str(number), 1)
        return PrunedBatch(last=last, scanned=1000, deleted=2)


class Pruned(SyncObserver):
    def __init__(self) -> None:
        self.counts: list[int] = []

    def revisions_pruned(self, count: int) -> None:
        self.counts.append(count)


def job(store: SweptStore, observer: SyncObserver) -> RevisionRetention:
    ctx = make_context(FakePlatform(), store, observer=observer)
    return RevisionRetention(
        ctx, ctx.runner(Stopper(), fatal_is_final=False), RETENTION, clock=store.clock
    )


def test_a_run_stops_after_its_time_and_the_next_goes_on_from_there():
    store, observer = SweptStore(), Pruned()
    retention = job(store, observer)
    per_run = int(RUN_SECONDS / store.seconds) + 1  # the batch that crosses the limit ends it

    retention.run()
    assert len(store.asked) == per_run
    retention.run()
    retention.run()

    assert store.asked == [None, *(RevisionKey(str(n), 1) for n in range(store.batches - 1))]
    assert observer.counts == [2] * store.batches


def test_a_finished_sweep_waits_for_the_next_one_and_it_starts_from_the_beginning():
    store, observer = SweptStore(batches=1), Pruned()
    retention = job(store, observer)
    retention.run()
    store.clock.now += SWEEP_SECONDS / 2
    retention.run()  # not due yet: nothing read
    assert store.asked == [None]
    store.clock.now += SWEEP_SECONDS / 2
    retention.run()
    assert store.asked == [None, None]

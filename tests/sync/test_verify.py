"""``recordsync verify``'s engine on the ports: a scripted platform and an in-memory
store drive it, no socket and no database.  What the command and the daemon add around it is
tested in tests/service/test_verify.py against the simulator."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from support.fakes import HOUR, NOW, FakePlatform, InstantStopper, expired, record

from recordsync.core.models import Record
from recordsync.platform.budget import Priority
from recordsync.sync.comparison import Difference
from recordsync.sync.demand import SnapshotDemand
from recordsync.sync.ports import VerifyStore
from recordsync.sync.verify import verify_range

DAY_ONE = NOW.replace(hour=0, minute=0, second=0, microsecond=0)
START, END = DAY_ONE, DAY_ONE + 24 * HOUR


def at(hour: int) -> datetime:
    return DAY_ONE + hour * HOUR


@dataclass
class VerifyFake:
    """The warehouse as verify sees it: rows by id, the highest revision kept on repair."""

    rows: dict[str, Record] = field(default_factory=dict)
    journal: list[str] = field(default_factory=list)
    repairs: list[list[str]] = field(default_factory=list)

    def count_created(self, start: datetime, end: datetime) -> int:
        return sum(1 for row in self.rows.values() if start <= row.created_at < end)

    def record_ids_created(self, start: datetime, end: datetime) -> list[str]:
        self.journal.append("record_ids_created")
        return [key for key, row in self.rows.items() if start <= row.created_at < end]

    def stored_records(self, record_ids: Collection[str]) -> dict[str, Record]:
        return {key: self.rows[key] for key in record_ids if key in self.rows}

    def repair_records(self, *, newer: Sequence[Record], same_revision: Sequence[Record]) -> None:
        self.repairs.append([item.record_id for item in [*newer, *same_revision]])
        for item in [*newer, *same_revision]:
            held = self.rows.get(item.record_id)
            if held is None or held.revision <= item.revision:
                self.rows[item.record_id] = item


def platform_and_store() -> tuple[FakePlatform, VerifyFake]:
    """The platform lists a (revision 2), b and c; the warehouse holds a at revision 1, c as
    listed, and d, which the platform does not list."""
    a2 = record("a", 2, created=at(1), updated=at(3))
    b1 = record("b", 1, created=at(2), updated=at(2))
    c1 = record("c", 1, created=at(4), updated=at(4))
    d1 = record("d", 1, created=at(5), updated=at(5))
    platform = FakePlatform(records=[a2, b1, c1])
    store = VerifyFake(rows={"a": record("a", 1, created=at(1), updated=at(1)), "c": c1, "d": d1})
    return platform, store


def run(platform: FakePlatform, store: VerifyStore, *, repair: bool):
    return verify_range(
        platform, store, START, END, page_size=2, repair=repair, stopper=InstantStopper()
    )


def test_each_kind_of_difference_is_counted_for_its_day() -> None:
    platform, store = platform_and_store()
    result = run(platform, store, repair=False)
    [day] = result.days
    assert (day.platform_rows, day.warehouse_rows) == (3, 3)
    assert day.examples[Difference.MISSING] == ["b"]
    assert day.examples[Difference.BEHIND] == ["a"]
    assert day.examples[Difference.WAREHOUSE_ONLY] == ["d"]
    assert result.faults == 2
    assert store.repairs == []  # no --repair: nothing written


def test_the_warehouse_is_listed_before_the_platform_is_read_at_the_lowest_priority() -> None:
    platform, store = platform_and_store()
    journal: list[str] = []
    platform.journal = journal
    store.journal = journal
    run(platform, store, repair=False)
    assert journal[0] == "record_ids_created"  # a row the tail stores later is never "only"
    assert {call.priority for call in platform.calls} == {Priority.BACKGROUND}


def test_a_repair_writes_the_platforms_records_and_counts_what_it_fixed() -> None:
    platform, store = platform_and_store()
    result = run(platform, store, repair=True)
    assert sorted(item for page in store.repairs for item in page) == ["a", "b"]
    assert result.repaired == 2
    assert store.rows["a"].revision == 2
    assert "d" in store.rows  # a row only the warehouse has is never deleted
    again = run(FakePlatform(records=platform.records), store, repair=False)
    assert again.faults == 0


def test_a_window_whose_cursor_expires_is_read_again_whole() -> None:
    platform, store = platform_and_store()
    platform.fail("records_next", "0:2", expired("records"))
    result = run(platform, store, repair=False)
    assert len(platform.calls_to("records_first")) == 2
    assert result.total(Difference.MISSING) == 1  # counted once, not once per reading
    assert result.platform_rows == 3


@dataclass
class WatchingStore(VerifyFake):
    """Notes, each time verify reads the warehouse, whether the merchant's demand is on."""

    demand: SnapshotDemand = field(default_factory=SnapshotDemand)
    seen: list[bool] = field(default_factory=list)

    def stored_records(self, record_ids: Collection[str]) -> dict[str, Record]:
        self.seen.append(self.demand.running)
        return super().stored_records(record_ids)


@pytest.mark.parametrize(
    ("repair", "wants_budget"), [(True, True), (False, False)], ids=["repair", "check-only"]
)
def test_a_repairing_verify_wants_the_budget_while_it_reads_a_check_never(
    repair: bool, wants_budget: bool
) -> None:
    """A repair is a job reading windows like a resync: registered with the merchant's demand,
    it stretches the tail's idle polls; a plain verify leaves the tail's pace alone."""
    platform, plain = platform_and_store()
    store = WatchingStore(rows=plain.rows)
    told: list[bool] = []
    with store.demand.listening(lambda: told.append(store.demand.running)):
        verify_range(
            platform,
            store,
            START,
            END,
            page_size=2,
            repair=repair,
            stopper=InstantStopper(),
            demand=store.demand,
        )
    assert store.seen
    assert set(store.seen) == {wants_budget}
    assert not store.demand.running  # ended with the run
    assert told == ([True, False] if repair else [])


def test_a_day_with_more_rows_than_a_piece_is_compared_in_pieces_with_the_same_findings() -> None:
    """Memory holds one piece's ids, not a day's: the findings are those of the whole day."""
    platform, store = platform_and_store()
    whole = run(platform, store, repair=False)
    platform, store = platform_and_store()
    store.journal = []
    pieces = verify_range(
        platform,
        store,
        START,
        END,
        page_size=2,
        repair=False,
        stopper=InstantStopper(),
        piece_rows=1,
    )
    assert store.journal.count("record_ids_created") == 3  # three rows stored: three pieces
    [day], [whole_day] = pieces.days, whole.days
    assert (day.platform_rows, day.warehouse_rows) == (whole_day.platform_rows, 3)
    assert day.counts == whole_day.counts
    assert day.examples == whole_day.examples

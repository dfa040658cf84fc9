"""Snapshot windows and the one-shot backfill, with fakes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support.fakes import (
    HOUR,
    NOW,
    FakePlatform,
    FakeStore,
    expired,
    make_engine,
    record,
    tailing_state,
)

from recordsync.core.errors import ConfigurationError, CursorExpiredError
from recordsync.core.state import backfill_job
from recordsync.platform.budget import Priority
from recordsync.sync.engine import BackfillResult
from recordsync.sync.windows import plan_for_chains

START = NOW - 40 * HOUR
END = NOW - 2 * HOUR
IN_RANGE = [record(f"r{n:02}", created=START + n * 3 * HOUR, updated=NOW) for n in range(13)]
OUTSIDE = [
    record("before", created=START - HOUR, updated=NOW),
    record("after", created=END + HOUR, updated=NOW),
]
# One window, on whole milliseconds.
DAY_START = datetime(2024, 3, 5, 5, tzinfo=UTC)
DAY_END = datetime(2024, 3, 5, 9, tzinfo=UTC)


def test_backfill_registers_its_windows_once_reads_them_all_and_leaves_the_tail_alone():
    saved = tailing_state()
    store = FakeStore(state=saved)
    platform = FakePlatform(records=IN_RANGE + OUTSIDE)

    result = make_engine(platform, store).backfill(START, END)

    job = backfill_job(START, END)
    # 38 h in two equal windows (at most a day each, at least the 2 chains configured).
    assert result == BackfillResult(job=job, windows=2, records=len(IN_RANGE))
    assert store.calls.count("ensure_job") == 1
    assert [item.window for item in store.windows(job)] == plan_for_chains(START, END, 2)
    assert all(item.done for item in store.windows(job))
    assert set(store.rows) == {item.record_id for item in IN_RANGE}
    assert {call.priority for call in platform.calls_to("records_first", "records_next")} == {
        Priority.SNAPSHOT
    }
    # The tail's state is not the backfill's business.
    assert store.state == saved
    assert platform.calls_to("from_now", "changes") == []
    assert "commit_tail_page" not in store.calls
    assert "start_rebuild" not in store.calls


def test_a_second_backfill_of_the_same_range_finds_it_done_and_reads_nothing():
    store = FakeStore()
    platform = FakePlatform(records=IN_RANGE)
    first = make_engine(platform, store).backfill(START, END)
    reads = len(platform.calls)

    again = make_engine(platform, store).backfill(START, END)

    assert again == first
    assert len(platform.calls) == reads


@pytest.mark.parametrize(
    ("start", "end"),
    [(START, START), (END, START)],
    ids=["empty range", "reversed range"],
)
def test_backfill_refuses_a_range_whose_from_is_not_before_its_to(start: datetime, end: datetime):
    store = FakeStore()
    platform = FakePlatform(records=IN_RANGE)

    with pytest.raises(ConfigurationError, match="--from must be earlier than --to"):
        make_engine(platform, store).backfill(start, end)

    assert store.calls == []
    assert platform.calls == []


def test_an_expired_records_cursor_restarts_that_window_from_its_start():
    rows = [record(f"w{n}", created=DAY_START + n * HOUR, updated=NOW) for n in range(3)]
    platform = FakePlatform(records=rows)
    platform.fail("records_next", "0:2", expired("records"))  # the first chain's second page
    store = FakeStore()

    # One chain: the day is one window (no round trip measured plans for the chains set).
    engine = make_engine(platform, store, page_size=2, snapshot_concurrency=1)
    result = engine.backfill(DAY_START, DAY_END)

    assert store.calls.count("restart_window") == 1
    firsts = platform.calls_to("records_first")
    assert [call.at for call in firsts] == [DAY_START.isoformat(), DAY_START.isoformat()]
    assert [call.at for call in platform.calls_to("records_next")] == ["0:2", "1:2"]
    # The count restarted with the chain: 3 records, not the 2 of the abandoned chain plus 3.
    assert result.records == 3
    assert set(store.rows) == {"w0", "w1", "w2"}


def test_an_expired_first_page_is_not_a_restart_it_stops_the_backfill():
    platform = FakePlatform(records=[record("w0", created=DAY_START, updated=NOW)])
    platform.fail("records_first", DAY_START.isoformat(), expired("records"))
    store = FakeStore()

    with pytest.raises(CursorExpiredError):
        make_engine(platform, store, snapshot_concurrency=1).backfill(DAY_START, DAY_END)

    assert "restart_window" not in store.calls
    assert "commit_window_page" not in store.calls
    assert "commit_window_pages" not in store.calls

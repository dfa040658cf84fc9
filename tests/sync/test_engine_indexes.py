"""The sync leaves the BI indexes out of a first load only when the writer, not the rate
limit, would bound it, and asks for them once its job is done (``indexes``), with fakes: the
store leaves them out when asked to as a new job starts into no rows at all."""

from __future__ import annotations

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

from recordsync.core.errors import CursorExpiredError
from recordsync.core.state import REBUILD_JOB, Phase
from recordsync.platform.budget import Pace
from recordsync.sync.indexes import WRITE_BOUND_RECORDS_PER_S, defer_for
from recordsync.sync.windows import plan_for_chains

END = NOW - 2 * HOUR
START = END - 36 * HOUR  # two windows
ROWS = [record(f"b{n}", created=START + n * 2 * HOUR, updated=NOW) for n in range(18)]


def write_bound(platform: FakePlatform) -> FakePlatform:
    """A limit of 10 000 pages (of the fakes' 2 records) a second: 20 000 records/s, which
    the writer, not the budget, would bound."""
    platform.record_requests = 10_000
    return platform


@pytest.mark.parametrize(
    ("requests", "seconds", "page_size", "defer"),
    [
        (2, 1.0, 1000, False),  # the platform's default: 2 000 records/s
        (5, 1.0, 1000, False),  # 5 000: an indexed writer still keeps up
        (6, 1.0, 1000, True),
        (100_000, 1.0, 1000, True),  # the benchmarks' lifted limit
        (100, 1.0, 20, False),  # small pages: 2 000 records/s
        (20, 2.0, 1000, True),  # 10 000 records/s
    ],
)
def test_only_a_load_the_writer_would_bound_leaves_them_out(requests, seconds, page_size, defer):
    assert defer_for(Pace(requests, seconds, 0.05, None), page_size) is defer
    assert (requests / seconds * page_size > WRITE_BOUND_RECORDS_PER_S) is defer


def test_a_backfill_at_the_default_limit_keeps_them_and_builds_nothing():
    store = FakeStore()

    make_engine(FakePlatform(records=ROWS), store).backfill(START, END)

    assert store.bi_indexes
    assert store.deferrals == 0


def test_the_daemon_s_first_rebuild_at_the_default_limit_keeps_them():
    store = FakeStore()

    assert make_engine(FakePlatform(records=ROWS), store, history_from=START).run() is True

    assert store.bi_indexes
    assert store.deferrals == 0


def test_a_backfill_into_an_empty_store_ends_with_its_indexes_built():
    store = FakeStore()

    make_engine(write_bound(FakePlatform(records=ROWS)), store).backfill(START, END)

    assert store.deferrals == 1
    assert store.bi_indexes
    assert store.calls.index("ensure_job") < store.calls.index("build_bi_indexes")
    assert store.calls[-2:] == ["load_windows", "build_bi_indexes"]


def test_a_backfill_stopped_mid_way_builds_nothing_and_its_resume_builds_them():
    platform = write_bound(FakePlatform(records=ROWS))
    # The second window's first page: the other windows are read, this one never is.
    second = plan_for_chains(START, END, 2)[1]  # the fakes' 2 chains configured
    platform.fail("records_first", second.start.isoformat(), expired("x"))
    store = FakeStore()

    with pytest.raises(CursorExpiredError):
        make_engine(platform, store).backfill(START, END)
    assert not store.bi_indexes
    assert "build_bi_indexes" not in store.calls

    make_engine(platform, store).backfill(START, END)
    assert store.bi_indexes


def test_the_daemon_s_first_rebuild_builds_them_when_its_last_window_is_done():
    store = FakeStore()

    assert make_engine(write_bound(FakePlatform(records=ROWS)), store, history_from=START).run()

    assert store.state is not None
    assert store.state.phase is Phase.TAILING
    assert all(item.done for item in store.windows(REBUILD_JOB))
    assert store.bi_indexes
    assert store.calls.count("build_bi_indexes") == 1


def test_a_daemon_taking_up_a_tailing_merchant_builds_what_is_missing():
    """A backfill abandoned half-way, or a kill between a job's last window and the build."""
    store = FakeStore(state=tailing_state(), bi_indexes=False)

    assert make_engine(FakePlatform(), store, history_from=None).run() is True

    assert store.bi_indexes

"""The sync asks for the BI indexes a first load left out once its job is done (``indexes``),
with fakes: the store leaves them out when a new job starts into no rows at all."""

from __future__ import annotations

import pytest
from sync.fakes import (
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
from recordsync.sync.plan import plan_windows

END = NOW - 2 * HOUR
START = END - 36 * HOUR  # two UTC midnights: three windows
ROWS = [record(f"b{n}", created=START + n * 2 * HOUR, updated=NOW) for n in range(18)]


def test_a_backfill_into_an_empty_store_ends_with_its_indexes_built():
    store = FakeStore()

    make_engine(FakePlatform(records=ROWS), store).backfill(START, END)

    assert store.bi_indexes
    assert store.calls.index("ensure_job") < store.calls.index("build_bi_indexes")
    assert store.calls[-2:] == ["load_windows", "build_bi_indexes"]


def test_a_backfill_stopped_mid_way_builds_nothing_and_its_resume_builds_them():
    platform = FakePlatform(records=ROWS)
    # The second window's first page: the other windows are read, this one never is.
    platform.fail("records_first", plan_windows(START, END)[1].start.isoformat(), expired("x"))
    store = FakeStore()

    with pytest.raises(CursorExpiredError):
        make_engine(platform, store).backfill(START, END)
    assert not store.bi_indexes
    assert "build_bi_indexes" not in store.calls

    make_engine(platform, store).backfill(START, END)
    assert store.bi_indexes


def test_the_daemon_s_first_rebuild_builds_them_when_its_last_window_is_done():
    store = FakeStore()

    assert make_engine(FakePlatform(records=ROWS), store, history_from=START).run() is True

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

"""Anchoring and rebuilds (spec, Records endpoints, "Rebuild without gaps"), with fakes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support.fakes import (
    HOUR,
    NOW,
    Call,
    FakePlatform,
    FakeStore,
    InstantStopper,
    RecordingObserver,
    expired,
    make_context,
    make_engine,
    record,
    tailing_state,
)

from recordsync.core.errors import (
    ConfigurationError,
    ProtocolError,
    ServerError,
    TransportError,
    WarehouseUnavailableError,
)
from recordsync.core.state import REBUILD_JOB, Phase
from recordsync.platform.budget import Priority
from recordsync.sync.anchor import anchor
from recordsync.sync.plan import plan_windows

# NOW (10:30:00.123456) to the millisecond, plus 1 ms, plus the 5 s overlap of the options.
SNAPSHOT_END = datetime(2024, 3, 5, 10, 30, 5, 124000, tzinfo=UTC)


def test_the_first_start_anchors_before_reading_a_record_and_ends_the_plan_at_platform_time():
    journal: list[str] = []
    history_from = NOW - 30 * HOUR
    rows = [
        record(f"r{n}", created=history_from + n * 3 * HOUR, updated=NOW - HOUR) for n in range(9)
    ]
    platform = FakePlatform(records=rows, journal=journal)
    store = FakeStore(calls=journal)

    assert make_engine(platform, store, history_from=history_from).run() is True

    assert platform.calls[0] == Call("from_now", "", Priority.TAIL)
    assert journal.index("from_now") < journal.index("start_rebuild")
    assert journal.index("start_rebuild") < journal.index("records_first")
    assert store.state is not None
    assert store.state.anchor_at == NOW
    assert store.state.change_cursor == "anchor-1"
    assert store.state.snapshot_to == SNAPSHOT_END
    planned = [item.window for item in store.windows(REBUILD_JOB)]
    assert planned == plan_windows(history_from, SNAPSHOT_END)
    assert planned[-1].end == SNAPSHOT_END
    assert all(item.done for item in store.windows(REBUILD_JOB))
    assert set(store.rows) == {item.record_id for item in rows}


def test_a_start_with_saved_state_resumes_the_tail_without_anchoring():
    store = FakeStore(state=tailing_state())
    platform = FakePlatform()

    assert make_engine(platform, store, history_from=None).run() is True

    assert platform.calls_to("from_now") == []
    assert "start_rebuild" not in store.calls
    assert platform.calls_to("changes")[0].at == "saved-cursor"


def test_the_first_start_without_history_from_is_a_configuration_error():
    platform = FakePlatform()

    with pytest.raises(ConfigurationError, match="RECORDSYNC_HISTORY_FROM"):
        make_engine(platform, FakeStore(), history_from=None).run()

    assert platform.calls == []


def test_an_expired_change_cursor_rebuilds_from_a_new_anchor_and_keeps_the_rows():
    kept = record("old", 7, created=NOW - 40 * HOUR, updated=NOW - 39 * HOUR)
    fresh = record("new", created=NOW - 3 * HOUR, updated=NOW - 3 * HOUR)
    store = FakeStore(state=tailing_state())
    store.keep(kept)
    platform = FakePlatform(records=[fresh])
    platform.fail("changes", "saved-cursor", expired("record-changes"))
    observer = RecordingObserver()

    engine = make_engine(platform, store, observer=observer, history_from=None)
    assert engine.run() is True

    assert store.state is not None
    assert store.state.rebuilds == 1
    assert store.state.change_cursor == "anchor-1"
    assert store.state.phase is Phase.TAILING
    assert observer.rebuilds == ["change cursor expired"]
    assert "rebuilding" in observer.phases
    # The history comes from the saved state; the new snapshot ends at the new anchor.
    planned = [item.window for item in store.windows(REBUILD_JOB)]
    assert planned == plan_windows(NOW - 30 * HOUR, SNAPSHOT_END)
    assert store.rows == {"old": kept, "new": fresh}
    assert platform.calls_to("changes")[-1].at == "anchor-1"


def platform_5xx(platform: FakePlatform, store: FakeStore) -> None:
    platform.fail("from_now", "", ServerError("boom", endpoint="record-changes", status=500))


def connection_reset(platform: FakePlatform, store: FakeStore) -> None:
    platform.fail("from_now", "", TransportError("reset", endpoint="record-changes"))


def anchor_without_time(platform: FakePlatform, store: FakeStore) -> None:
    platform.anchors_without_time = 1


def warehouse_down_loading(platform: FakePlatform, store: FakeStore) -> None:
    store.fail("load_state", WarehouseUnavailableError("server gone"))


def warehouse_down_saving(platform: FakePlatform, store: FakeStore) -> None:
    store.fail("start_rebuild", WarehouseUnavailableError("server gone"))


@pytest.mark.parametrize(
    ("break_once", "kind"),
    [
        (platform_5xx, "ServerError"),
        (connection_reset, "TransportError"),
        (anchor_without_time, "ProtocolError"),
        (warehouse_down_loading, "WarehouseUnavailableError"),
        (warehouse_down_saving, "WarehouseUnavailableError"),
    ],
    ids=[
        "platform 5xx",
        "connection reset",
        "anchor page without projection_as_of",
        "warehouse down while loading the state",
        "warehouse down while saving the anchor",
    ],
)
def test_a_retryable_failure_of_the_anchor_step_is_retried_after_a_backoff(break_once, kind):
    platform = FakePlatform()
    store = FakeStore()
    break_once(platform, store)
    stopper = InstantStopper()
    observer = RecordingObserver()

    engine = make_engine(platform, store, stopper=stopper, observer=observer, history_from=NOW)
    assert engine.run() is True

    assert observer.errors == [kind]
    assert len(stopper.slept) == 1
    assert 0 <= stopper.slept[0] <= 1.0  # the first backoff: full jitter up to the base delay
    assert store.state is not None
    assert store.state.anchor_at == NOW  # platform time, never a guess from the local clock
    assert store.state.snapshot_to == SNAPSHOT_END


def test_an_anchor_page_without_projection_as_of_is_a_protocol_error_and_saves_nothing():
    platform = FakePlatform()
    platform.anchors_without_time = 1
    store = FakeStore()

    with pytest.raises(ProtocolError) as raised:
        anchor(make_context(platform, store), NOW - HOUR, rebuild_reason=None)

    assert raised.value.endpoint == "record-changes"
    assert raised.value.request_id == "req-anchor-1"
    assert store.state is None
    assert "start_rebuild" not in store.calls

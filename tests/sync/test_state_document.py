"""The state document of ``recordsync merchant state``: an export parses back to the same
values, and whatever the sync could not resume from is refused with its reason."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from recordsync.core.state import (
    REBUILD_JOB,
    Phase,
    StoredState,
    SyncState,
    Window,
    WindowProgress,
)
from recordsync.sync import state_document
from recordsync.sync.state_document import FORMAT, InvalidStateError, parse, to_document
from recordsync.warehouse import schema

MERCHANT = "m-state"
ANCHOR = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
HISTORY_FROM = ANCHOR - timedelta(days=2)
STATE = SyncState(
    merchant_id=MERCHANT,
    phase=Phase.SNAPSHOT,
    change_cursor="chg-0001",
    anchor_at=ANCHOR,
    history_from=HISTORY_FROM,
    snapshot_to=ANCHOR + timedelta(milliseconds=1),
    rebuilds=1,
    last_sequence="18446744073709551617",  # past 64 bits: a decimal string
    last_projection_as_of=ANCHOR + timedelta(minutes=5),
    last_commit_at=None,
)
WINDOWS = [
    WindowProgress(
        MERCHANT,
        REBUILD_JOB,
        Window(HISTORY_FROM, HISTORY_FROM + timedelta(days=1)),
        None,
        None,
        done=True,
        records=120,
    ),
    WindowProgress(
        MERCHANT,
        REBUILD_JOB,
        Window(HISTORY_FROM + timedelta(days=1), ANCHOR),
        "rec-7",
        ANCHOR - timedelta(hours=1),
        done=False,
        records=40,
    ),
    WindowProgress(
        MERCHANT,
        "backfill:2026-10-01T00:00:00+00:00/2026-10-02T00:00:00+00:00",
        Window(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 2, tzinfo=UTC)),
        None,
        None,
        done=True,
        records=3,
    ),
]


WAREHOUSE = "2b0c8c1e-5a55-4c3f-9d44-0f6f3bd1c0de"
STORED = StoredState(state=STATE, windows=WINDOWS, warehouse_id=WAREHOUSE)


def document() -> dict[str, Any]:
    return to_document(MERCHANT, STORED, epoch=1764331200000)


def test_an_export_parses_back_to_the_same_state_windows_and_warehouse():
    assert document()["format"] == FORMAT
    assert document()["warehouse_id"] == WAREHOUSE
    assert parse(document(), MERCHANT) == STORED
    never = StoredState(state=None, windows=[], warehouse_id=None)
    assert parse(to_document(MERCHANT, never, epoch=None), MERCHANT) == never


def test_an_earlier_version_s_export_names_no_warehouse():
    earlier = document()
    del earlier["warehouse_id"]
    assert parse(earlier, MERCHANT).warehouse_id is None


def test_the_limits_are_the_warehouse_columns():
    assert state_document.MAX_NAME == schema.ID_LENGTH
    assert state_document.MAX_WAREHOUSE_ID == schema.REVISION_LENGTH


def _with(change) -> dict[str, Any]:
    doc = copy.deepcopy(document())
    change(doc)
    return doc


def _set(path: str, value: object):
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        target[int(last) if last.isdigit() else last] = value

    return change


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_set("format", "something/else"), "not a recordsync-state/1 document"),
        (_set("merchant_id", "m-other"), "the state of merchant 'm-other', not 'm-state'"),
        (
            lambda doc: (
                _set("windows.1.start", (ANCHOR - timedelta(hours=1)).isoformat())(doc),
                _set("windows.1.end", (ANCHOR + timedelta(hours=1)).isoformat())(doc),
            ),
            "past the anchor",
        ),
        (
            _set("windows.0.start", (HISTORY_FROM - timedelta(hours=1)).isoformat()),
            "longer than 24 h",
        ),
        (_set("windows.1.start", ANCHOR.isoformat()), "empty"),
        (_set("windows.0.end", "2026-11-27T12:00:00"), "has no offset"),
        (_set("windows.0.end", "yesterday"), "is not an RFC3339 time"),
        (_set("windows.1.cursor", "c" * 4097), "not a cursor"),
        (_set("windows.2.job", "snapshot"), "none of 'rebuild', 'backfill:...', 'resync:...'"),
        (_set("windows.0.records", -1), "records: not a whole number"),
        (_set("windows.0.done", "yes"), "done: not true or false"),
        (_set("state.phase", "tailing"), "tailing while rebuild windows are still open"),
        (_set("state.phase", "paused"), "is not one of snapshot, tailing"),
        (_set("state.change_cursor", ""), "state.change_cursor: not a cursor"),
        (_set("state.last_sequence", "1e3"), "not a decimal string"),
        (_set("state.rebuilds", True), "state.rebuilds"),
        (
            _set("state.snapshot_to", (ANCHOR - timedelta(hours=1)).isoformat()),
            "snapshot_to is not after the anchor",
        ),
        (_set("state", None), "rebuild windows without a state"),
        (_set("windows", {"a": 1}), "windows: not a list"),
        (_set("windows.2", "not an object"), "windows[2]: not a JSON object"),
        (lambda doc: doc["windows"].append(copy.deepcopy(doc["windows"][0])), "two windows"),
        (
            _set("windows.2.job", f"backfill:{'x' * 200}/{'y' * 60}"),
            "270 characters, longer than the 255 the warehouse holds",
        ),
        (_set("windows.0.records", 2**63), "records: not a whole number from 0 to"),
        (_set("state.rebuilds", 2**31), "state.rebuilds: not a whole number from 0 to"),
        (_set("windows.0.end", "0001-01-01T00:00:00+00:00"), "is before 1970"),
        (_set("warehouse_id", 7), "warehouse_id: not a warehouse id"),
        (_set("warehouse_id", "w" * 65), "warehouse_id: not a warehouse id"),
    ],
    ids=[
        "format",
        "another-merchant",
        "window-past-the-anchor",
        "window-over-24h",
        "empty-window",
        "time-without-offset",
        "not-a-time",
        "cursor-too-long",
        "unknown-job",
        "negative-records",
        "done-not-bool",
        "tailing-with-open-windows",
        "unknown-phase",
        "empty-change-cursor",
        "sequence-not-decimal",
        "rebuilds-bool",
        "snapshot-before-anchor",
        "windows-without-state",
        "windows-not-a-list",
        "window-not-an-object",
        "duplicate-window",
        "job-name-too-long",
        "records-past-bigint",
        "rebuilds-past-integer",
        "time-before-1970",
        "warehouse-id-not-text",
        "warehouse-id-too-long",
    ],
)
def test_what_the_sync_could_not_resume_from_is_refused_with_its_reason(change, reason):
    with pytest.raises(InvalidStateError) as refused:
        parse(_with(change), MERCHANT)
    assert reason in str(refused.value)


@pytest.mark.parametrize("value", [None, [], "text", 3])
def test_a_document_that_is_not_an_object_is_refused(value):
    with pytest.raises(InvalidStateError, match="the document: not a JSON object"):
        parse(value, MERCHANT)

"""A merchant's sync state as a JSON document: what ``recordsync merchant state export``
writes and ``import`` reads back.  Pure: no warehouse, no files.

The document holds what the sync resumes from: the ``sync_state`` row (phase, the change
cursor, the anchor and the snapshot plan) and every job's snapshot windows with their
cursors; the lease epoch at export is informational (an import raises its own).  An export
fed to ``parse`` gives back the same values.  ``parse`` refuses, with its reason, anything
the sync could not resume from safely: another format, another merchant's state (the
platform binds every cursor to its merchant), a cursor longer than the platform issues,
times without an offset, an empty or over-long window, a rebuild window outside the snapshot
plan (past the anchor's snapshot_to, or before history_from), a snapshot that ends before the
anchor (a gap), a phase that says "tailing" while rebuild
windows are still open.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from recordsync.core.errors import RecordSyncError
from recordsync.core.state import (
    REBUILD_JOB,
    Phase,
    StoredState,
    SyncState,
    Window,
    WindowProgress,
)

FORMAT: Final = "recordsync-state/1"
MAX_CURSOR: Final = 4096  # spec: Limits, "Cursor length"
MAX_WINDOW: Final = timedelta(hours=24)  # spec: GET /v1/records, windows of at most 24 h
_RANGE_JOB: Final = re.compile(r"^(backfill:|resync:[0-9a-f]+:)[^/]+/[^/]+$")
_SEQUENCE: Final = re.compile(r"^[0-9]{1,64}$")
_MILLISECOND: Final = timedelta(milliseconds=1)
# What the warehouse's columns hold (``warehouse.schema``; a test keeps the two equal): a value
# past them is refused here with its name, not by the database in mid-import.
MAX_NAME: Final = 255  # a job's name, as snapshot_windows.job
MAX_WAREHOUSE_ID: Final = 64
MAX_COUNT: Final = 2**63 - 1  # BIGINT
MAX_REBUILDS: Final = 2**31 - 1  # INTEGER
EARLIEST: Final = datetime(1970, 1, 1, tzinfo=UTC)  # no platform time is earlier


class InvalidStateError(RecordSyncError):
    """A state document the sync could not resume from; the message says why."""


def to_document(merchant_id: str, stored: StoredState, *, epoch: int | None) -> dict[str, Any]:
    """The document of ``merchant_id``'s state as ``stored`` holds it."""
    return {
        "format": FORMAT,
        "merchant_id": merchant_id,
        "warehouse_id": stored.warehouse_id,
        "epoch": epoch,
        "state": None if stored.state is None else _state_member(stored.state),
        "windows": [_window_member(window) for window in stored.windows],
    }


def parse(document: object, merchant_id: str) -> StoredState:
    """The state ``document`` holds for ``merchant_id``, validated (module docstring);
    ``InvalidStateError`` naming the first problem otherwise.  A document of an earlier
    version names no warehouse (``warehouse_id`` None)."""
    doc = _mapping(document, "the document")
    if doc.get("format") != FORMAT:
        raise InvalidStateError(f"not a {FORMAT} document (format: {doc.get('format')!r})")
    owner = doc.get("merchant_id")
    if owner != merchant_id:
        raise InvalidStateError(
            f"the file holds the state of merchant {owner!r}, not {merchant_id!r}: its cursors "
            "are bound to that merchant"
        )
    raw_state = doc.get("state")
    state = None if raw_state is None else _parse_state(raw_state, merchant_id)
    raw_windows = doc.get("windows")
    if not isinstance(raw_windows, list):
        raise InvalidStateError("windows: not a list")
    windows = [_parse_window(item, merchant_id, n) for n, item in enumerate(raw_windows)]
    _check_plan(state, windows)
    warehouse_id = doc.get("warehouse_id")
    if warehouse_id is not None and (
        not isinstance(warehouse_id, str) or not 1 <= len(warehouse_id) <= MAX_WAREHOUSE_ID
    ):
        raise InvalidStateError(
            f"warehouse_id: not a warehouse id (a string of 1 to {MAX_WAREHOUSE_ID} characters)"
        )
    return StoredState(state=state, windows=windows, warehouse_id=warehouse_id)


def _state_member(state: SyncState) -> dict[str, Any]:
    return {
        "phase": state.phase.value,
        "change_cursor": state.change_cursor,
        "anchor_at": state.anchor_at.isoformat(),
        "history_from": state.history_from.isoformat(),
        "snapshot_to": state.snapshot_to.isoformat(),
        "rebuilds": state.rebuilds,
        "last_sequence": state.last_sequence,
        "last_projection_as_of": _time_text(state.last_projection_as_of),
        "last_commit_at": _time_text(state.last_commit_at),
    }


def _window_member(window: WindowProgress) -> dict[str, Any]:
    return {
        "job": window.job,
        "start": window.window.start.isoformat(),
        "end": window.window.end.isoformat(),
        "cursor": window.cursor,
        "cursor_issued_at": _time_text(window.cursor_issued_at),
        "done": window.done,
        "records": window.records,
    }


def _parse_state(raw: object, merchant_id: str) -> SyncState:
    item = _mapping(raw, "state")
    phase_text = item.get("phase")
    if phase_text not in {phase.value for phase in Phase}:
        raise InvalidStateError(f"state.phase: {phase_text!r} is not one of snapshot, tailing")
    rebuilds = _count(item.get("rebuilds"), "state.rebuilds", MAX_REBUILDS)
    sequence = item.get("last_sequence")
    if sequence is not None and (not isinstance(sequence, str) or not _SEQUENCE.match(sequence)):
        raise InvalidStateError("state.last_sequence: not a decimal string")
    state = SyncState(
        merchant_id=merchant_id,
        phase=Phase(phase_text),
        change_cursor=_cursor(item.get("change_cursor"), "state.change_cursor", required=True),
        anchor_at=_time(item.get("anchor_at"), "state.anchor_at"),
        history_from=_time(item.get("history_from"), "state.history_from"),
        snapshot_to=_time(item.get("snapshot_to"), "state.snapshot_to"),
        rebuilds=rebuilds,
        last_sequence=sequence,
        last_projection_as_of=_optional_time(
            item.get("last_projection_as_of"), "state.last_projection_as_of"
        ),
        last_commit_at=_optional_time(item.get("last_commit_at"), "state.last_commit_at"),
    )
    if not state.history_from < state.snapshot_to:
        raise InvalidStateError("state: history_from is not before snapshot_to")
    if state.snapshot_to <= state.anchor_at:
        raise InvalidStateError(
            "state: snapshot_to is not after the anchor (anchor_at): records created between "
            "them would be read by neither the snapshot nor the change stream"
        )
    return state


def _parse_window(raw: object, merchant_id: str, n: int) -> WindowProgress:
    where = f"windows[{n}]"
    item = _mapping(raw, where)
    job = item.get("job")
    if not isinstance(job, str) or not (job == REBUILD_JOB or _RANGE_JOB.match(job)):
        raise InvalidStateError(
            f"{where}.job: {str(job)[:60]!r} is none of 'rebuild', 'backfill:...', 'resync:...'"
        )
    if len(job) > MAX_NAME:
        raise InvalidStateError(
            f"{where}.job: {len(job)} characters, longer than the {MAX_NAME} the warehouse holds"
        )
    window = Window(
        _time(item.get("start"), f"{where}.start"), _time(item.get("end"), f"{where}.end")
    )
    if not window.start < window.end:
        raise InvalidStateError(f"{where}: empty (start is not before end)")
    if window.end - window.start > MAX_WINDOW:
        raise InvalidStateError(f"{where}: longer than 24 h (the platform's records window)")
    done = item.get("done")
    if not isinstance(done, bool):
        raise InvalidStateError(f"{where}.done: not true or false")
    records = _count(item.get("records"), f"{where}.records", MAX_COUNT)
    return WindowProgress(
        merchant_id=merchant_id,
        job=job,
        window=window,
        cursor=_cursor(item.get("cursor"), f"{where}.cursor", required=False),
        cursor_issued_at=_optional_time(item.get("cursor_issued_at"), f"{where}.cursor_issued_at"),
        done=done,
        records=records,
    )


def _check_plan(state: SyncState | None, windows: Sequence[WindowProgress]) -> None:
    seen: set[tuple[str, datetime]] = set()
    for window in windows:
        key = (window.job, window.window.start)
        if key in seen:
            raise InvalidStateError(f"two windows of {window.job} start at {key[1].isoformat()}")
        seen.add(key)
    rebuild = [window for window in windows if window.job == REBUILD_JOB]
    if state is None:
        if rebuild:
            raise InvalidStateError("rebuild windows without a state to resume them from")
        return
    for window in rebuild:
        span = window.window
        # The plan takes bounds to whole milliseconds outward (``plan.plan_windows``).
        if span.end > state.snapshot_to + _MILLISECOND:
            raise InvalidStateError(
                f"the rebuild window [{span.start.isoformat()}, {span.end.isoformat()}) ends "
                f"past the anchor's snapshot plan (snapshot_to {state.snapshot_to.isoformat()})"
            )
        if span.start < state.history_from - _MILLISECOND:
            raise InvalidStateError(
                f"the rebuild window starting {span.start.isoformat()} is before history_from"
            )
    if state.phase is Phase.TAILING and any(not window.done for window in rebuild):
        raise InvalidStateError("state.phase is tailing while rebuild windows are still open")


def _mapping(raw: object, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidStateError(f"{where}: not a JSON object")
    return raw


def _cursor(raw: object, where: str, *, required: bool) -> Any:
    if raw is None and not required:
        return None
    if not isinstance(raw, str) or not 1 <= len(raw) <= MAX_CURSOR:
        raise InvalidStateError(f"{where}: not a cursor (a string of 1 to {MAX_CURSOR} characters)")
    return raw


def _count(raw: object, where: str, most: int) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 <= raw <= most:
        raise InvalidStateError(f"{where}: not a whole number from 0 to {most}")
    return raw


def _time(raw: object, where: str) -> datetime:
    if not isinstance(raw, str):
        raise InvalidStateError(f"{where}: not an RFC3339 time")
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidStateError(f"{where}: {raw[:40]!r} is not an RFC3339 time") from None
    if value.tzinfo is None:
        raise InvalidStateError(f"{where}: {raw[:40]!r} has no offset")
    try:
        if value < EARLIEST:
            raise InvalidStateError(f"{where}: {raw[:40]!r} is before 1970")
        value.astimezone(UTC)
    except OverflowError:
        raise InvalidStateError(f"{where}: {raw[:40]!r} is out of range") from None
    return value


def _optional_time(raw: object, where: str) -> datetime | None:
    return None if raw is None else _time(raw, where)


def _time_text(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()

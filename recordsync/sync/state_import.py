"""What a state import may write into this warehouse: the file's state, never moved past what
this warehouse has committed.  Pure: the caller reads the warehouse's own state and writes
the plan, in one transaction.

A state file's cursors cover rows that the warehouse it was exported from committed.  Put into
another warehouse (a fresh one, a staging copy), or into the same one restored from an older
backup, they would make the sync read on past rows it never got, and ``status`` would call
the snapshot complete.  So an import is held against the warehouse it goes into:

- the file names the warehouse it came from (``warehouse_identity``); from another one, or
  from none (an earlier version's export), it is refused unless the operator accepts it
  (``accept_foreign``);
- its tail may not be ahead of this warehouse's (a higher ``last_sequence``, or a later
  position in platform time where sequences cannot be compared), unless accepted
  (``accept_ahead``): the changes in between would never be read;
- its ``history_from`` may not be later than the configured one (or this warehouse's, when
  none is configured): the history between would never be read;
- every job's windows must tile its range (the rebuild's ``[history_from, snapshot_to)``, a
  backfill's or resync's from its name); a hole is planned again as unread windows;
- a window counts as done only where this warehouse's own windows of that job are done over
  all of it, and a window's cursor is kept only where this warehouse's window holds the same
  one; any other window is imported unread and read again.  A re-read is harmless (the
  upsert never lowers a revision), a skip is not.

What was planned again or reset is listed in ``ImportPlan.reread`` for the command's line.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from recordsync.core.state import (
    REBUILD_JOB,
    Phase,
    StoredState,
    SyncState,
    Window,
    WindowProgress,
)
from recordsync.core.times import ceil_ms, floor_ms
from recordsync.sync.plan import plan_windows
from recordsync.sync.state_document import InvalidStateError

_RANGE: re.Pattern[str] = re.compile(
    r"^(?:backfill:|resync:[0-9a-f]+:)(?P<start>[^/]+)/(?P<end>[^/]+)$"
)
_ACCEPT_AHEAD = (
    "--accept-ahead imports it all the same: the changes in between are never read, and "
    "records only they carried stay missing until a `merchant resync` of the range"
)


class ImportRefusedError(InvalidStateError):
    """The file is well formed, but importing it would skip what this warehouse lacks."""


@dataclass(frozen=True, slots=True)
class ImportPlan:
    state: SyncState | None
    windows: list[WindowProgress]
    reread: list[str] = field(default_factory=list)  # what will be read again, and why


def plan_import(
    incoming: StoredState,
    here: StoredState,
    *,
    configured_history_from: datetime | None,
    accept_foreign: bool = False,
    accept_ahead: bool = False,
) -> ImportPlan:
    """The state and windows to write for ``incoming`` into the warehouse whose own state is
    ``here`` (module docstring); ``ImportRefusedError`` naming every refusal otherwise."""
    refusals = []
    if not accept_foreign and (
        incoming.warehouse_id is None or incoming.warehouse_id != here.warehouse_id
    ):
        refusals.append(_foreign(incoming.warehouse_id, here.warehouse_id))
    if not accept_ahead and (ahead := _ahead(incoming.state, here.state)) is not None:
        refusals.append(ahead)
    if refusals:
        raise ImportRefusedError("; ".join(refusals))
    state = incoming.state
    if state is not None:
        bound = configured_history_from or (here.state.history_from if here.state else None)
        if bound is not None and floor_ms(state.history_from) > floor_ms(bound):
            raise ImportRefusedError(
                f"the file's history_from {state.history_from.isoformat()} is later than "
                f"{bound.isoformat()} (the configured history_from, or this warehouse's): the "
                "history between would never be read"
            )
    reread: list[str] = []
    windows = _tiled(state, incoming.windows, reread)
    windows = _held_to_here(windows, here.windows, reread)
    if state is not None:
        rebuild_open = any(w.job == REBUILD_JOB and not w.done for w in windows)
        phase = Phase.SNAPSHOT if rebuild_open else Phase.TAILING
        if phase is not state.phase:
            state = replace(state, phase=phase)
    return ImportPlan(state=state, windows=windows, reread=reread)


def _foreign(incoming: str | None, here: str | None) -> str:
    origin = (
        "the file names no warehouse (an export of an earlier version)"
        if incoming is None
        else f"the file was exported from warehouse {incoming}, this is {here}"
    )
    return (
        f"{origin}: its cursors cover rows that warehouse committed, not this one. "
        "--accept-foreign imports it all the same: the windows it marks done are read again "
        "here, and changes before its cursor that this warehouse lacks stay missing until a "
        "`recordsync verify --repair` or `merchant resync` of the range"
    )


def _ahead(incoming: SyncState | None, here: SyncState | None) -> str | None:
    """Why the file's tail is ahead of this warehouse's, or None when it is not."""
    if incoming is None:
        return None
    if here is None:
        if incoming.last_sequence is None:
            return None  # anchored, no change read yet: its windows are read again here
        return (
            f"the file's tail has read changes up to sequence {incoming.last_sequence}, and this "
            f"warehouse has no state of the merchant: {_ACCEPT_AHEAD}"
        )
    if incoming.last_sequence is not None and here.last_sequence is not None:
        ahead = int(incoming.last_sequence) > int(here.last_sequence)
        return (
            f"the file's tail is at sequence {incoming.last_sequence}, ahead of this warehouse's "
            f"{here.last_sequence} (a backup older than the file?): {_ACCEPT_AHEAD}"
            if ahead
            else None
        )
    same_place = incoming.last_sequence is None and incoming.change_cursor == here.change_cursor
    file_at, here_at = _position(incoming), _position(here)
    if same_place or file_at <= here_at:
        return None
    return (
        f"the file's tail stands at {file_at.isoformat()} (platform time), ahead of this "
        f"warehouse's {here_at.isoformat()}: {_ACCEPT_AHEAD}"
    )


def _position(state: SyncState) -> datetime:
    """Up to when, in platform time, the tail has read the changes: the last page's
    projection, else the anchor's."""
    return state.last_projection_as_of or state.anchor_at


def _job_range(job: str, state: SyncState | None) -> Window | None:
    if job == REBUILD_JOB:
        if state is None:
            return None
        return Window(floor_ms(state.history_from), ceil_ms(state.snapshot_to))
    match = _RANGE.match(job)
    if match is None:
        return None
    try:
        start = datetime.fromisoformat(match["start"])
        end = datetime.fromisoformat(match["end"])
    except ValueError:
        return None
    if start.tzinfo is None or end.tzinfo is None or not start < end:
        return None
    return Window(floor_ms(start.astimezone(UTC)), ceil_ms(end.astimezone(UTC)))


def _tiled(
    state: SyncState | None, windows: Sequence[WindowProgress], reread: list[str]
) -> list[WindowProgress]:
    """Every job's windows with the holes in its range planned again, unread; a window
    outside its job's range refused."""
    jobs: dict[str, list[WindowProgress]] = defaultdict(list)
    for window in windows:
        jobs[window.job].append(window)
    if state is not None:
        jobs.setdefault(REBUILD_JOB, [])
    merchant = state.merchant_id if state is not None else None
    tiled: list[WindowProgress] = []
    for job, members in jobs.items():
        span = _job_range(job, state)
        if span is None:
            raise ImportRefusedError(f"the job {job!r} names no range its windows could tile")
        members.sort(key=lambda w: w.window.start)
        for window in members:
            if window.window.start < span.start or window.window.end > span.end:
                raise ImportRefusedError(
                    f"a window of {job} [{window.window.start.isoformat()}, "
                    f"{window.window.end.isoformat()}) lies outside its range"
                )
        holes = list(_holes(span, (w.window for w in members)))
        tiled.extend(members)
        for hole in holes:
            owner = merchant or (members[0].merchant_id if members else "")
            tiled.extend(
                WindowProgress(
                    merchant_id=owner,
                    job=job,
                    window=piece,
                    cursor=None,
                    cursor_issued_at=None,
                    done=False,
                    records=0,
                )
                for piece in plan_windows(hole.start, hole.end)
            )
            reread.append(
                f"{job} [{hole.start.isoformat()}, {hole.end.isoformat()}) had no window: "
                "planned again"
            )
    return tiled


def _holes(span: Window, covered: Iterable[Window]) -> Iterable[Window]:
    """The parts of ``span`` that no window in ``covered`` (sorted by start) covers."""
    reached = span.start
    for window in covered:
        if window.start > reached:
            yield Window(reached, window.start)
        reached = max(reached, window.end)
    if reached < span.end:
        yield Window(reached, span.end)


def _held_to_here(
    windows: Sequence[WindowProgress], here: Sequence[WindowProgress], reread: list[str]
) -> list[WindowProgress]:
    """Each window done only where this warehouse's windows of its job are done over all of
    it, and its cursor kept only where this warehouse's same window holds the same one."""
    done_here: dict[str, list[Window]] = defaultdict(list)
    cursors_here: dict[tuple[str, Window], str | None] = {}
    for window in here:
        if window.done:
            done_here[window.job].append(window.window)
        cursors_here[(window.job, window.window)] = window.cursor
    for spans in done_here.values():
        spans.sort(key=lambda span: span.start)
    held: list[WindowProgress] = []
    undone = restarted = 0
    for window in windows:
        if window.done:
            keep = next(iter(_holes(window.window, done_here[window.job])), None) is None
            undone += not keep
        else:
            keep = window.cursor is None or (
                cursors_here.get((window.job, window.window)) == window.cursor
            )
            restarted += not keep
        held.append(
            window
            if keep
            else replace(window, done=False, cursor=None, cursor_issued_at=None, records=0)
        )
    if undone:
        reread.append(f"{undone} windows marked done that this warehouse has not read: read again")
    if restarted:
        reread.append(
            f"{restarted} windows whose cursor this warehouse never reached: read from their start"
        )
    return held

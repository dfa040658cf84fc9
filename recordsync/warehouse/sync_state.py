"""Where the sync stands: the merchant's ``sync_state`` row and its jobs' snapshot windows.

``sync_state`` holds the change cursor (the tail's) and the phase of the current (re)build;
``snapshot_windows`` holds one cursor per window of a job (the rebuild, or a one-shot
backfill).  Every function runs inside a transaction a store opened (``state_store``; the
page store's, ``pages.store``, for a page's cursor), so a cursor moves in the same
transaction as the rows it covers (``pages.commits``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, delete, func, insert, select, update

from recordsync.core.state import REBUILD_JOB, Phase, SyncState, Window, WindowProgress
from recordsync.warehouse.schema import snapshot_windows, sync_state
from recordsync.warehouse.types import CURSOR_LENGTH


def check_windows(windows: Sequence[Window]) -> None:
    """Refuse two windows with one start, or an empty window (before any transaction opens)."""
    starts = [window.start for window in windows]
    if len(set(starts)) != len(starts):
        raise ValueError("two windows share a start")
    for window in windows:
        if not window.start < window.end:
            raise ValueError(f"empty window [{window.start}, {window.end})")


def load_state(conn: Connection, merchant_id: str) -> SyncState | None:
    row = conn.execute(
        select(sync_state).where(sync_state.c.merchant_id == merchant_id)
    ).one_or_none()
    return None if row is None else _state(row)


def load_windows(conn: Connection, merchant_id: str, job: str) -> list[WindowProgress]:
    query = (
        select(snapshot_windows)
        .where(snapshot_windows.c.merchant_id == merchant_id, snapshot_windows.c.job == job)
        .order_by(snapshot_windows.c.window_start)
    )
    return [
        WindowProgress(
            merchant_id=row.merchant_id,
            job=row.job,
            window=Window(start=row.window_start, end=row.window_end),
            cursor=row.cursor,
            cursor_issued_at=row.cursor_issued_at,
            done=bool(row.done),
            records=int(row.records),
        )
        for row in conn.execute(query)
    ]


def start_rebuild(
    conn: Connection,
    merchant_id: str,
    *,
    change_cursor: str,
    anchor_at: datetime,
    history_from: datetime,
    snapshot_to: datetime,
    windows: Sequence[Window],
    now: datetime,
) -> SyncState:
    """Anchor a (re)build: the new change cursor and a fresh set of rebuild windows.

    The ``sync_state`` row is locked first, so two rebuilds at once count ``rebuilds`` right.
    """
    values = {
        "phase": (Phase.SNAPSHOT if windows else Phase.TAILING).value,
        "change_cursor": change_cursor,
        "anchor_at": anchor_at,
        "history_from": history_from,
        "snapshot_to": snapshot_to,
        "last_sequence": None,
        "last_projection_as_of": None,
        "last_commit_at": now,
        "updated_at": now,
    }
    previous = conn.execute(
        select(sync_state.c.rebuilds)
        .where(sync_state.c.merchant_id == merchant_id)
        .with_for_update()
    ).scalar_one_or_none()
    if previous is None:
        conn.execute(insert(sync_state).values(merchant_id=merchant_id, rebuilds=0, **values))
    else:
        conn.execute(
            update(sync_state)
            .where(sync_state.c.merchant_id == merchant_id)
            .values(rebuilds=previous + 1, **values)
        )
    conn.execute(
        delete(snapshot_windows).where(
            snapshot_windows.c.merchant_id == merchant_id,
            snapshot_windows.c.job == REBUILD_JOB,
        )
    )
    _insert_windows(conn, merchant_id, REBUILD_JOB, windows, now)
    state = load_state(conn, merchant_id)
    assert state is not None
    return state


def ensure_job(
    conn: Connection, merchant_id: str, job: str, windows: Sequence[Window], *, now: datetime
) -> tuple[list[WindowProgress], bool]:
    """Insert the job's windows unless it has some already; its windows either way, and
    whether this call created the job (a resume finds it there)."""
    known = conn.execute(
        select(func.count())
        .select_from(snapshot_windows)
        .where(snapshot_windows.c.merchant_id == merchant_id, snapshot_windows.c.job == job)
    ).scalar_one()
    if not known:
        _insert_windows(conn, merchant_id, job, windows, now)
    return load_windows(conn, merchant_id, job), not known and bool(windows)


def advance_window(
    conn: Connection,
    merchant_id: str,
    job: str,
    window: Window,
    *,
    cursor: str | None,
    cursor_issued_at: datetime | None,
    done: bool,
    records: int,
    now: datetime,
) -> None:
    """Move a window's cursor past a committed page of ``records`` rows.

    Finishing the last rebuild window also makes the phase TAILING, in the same transaction.
    """
    moved = conn.execute(
        _window_update(merchant_id, job, window).values(
            cursor=cursor,
            cursor_issued_at=cursor_issued_at,
            done=done,
            records=snapshot_windows.c.records + records,
            updated_at=now,
        )
    )
    if moved.rowcount != 1:
        raise LookupError(f"no window {_window_name(merchant_id, job, window)}")
    if job == REBUILD_JOB and done:
        _finish_rebuild_if_complete(conn, merchant_id, now)


def restart_window(
    conn: Connection, merchant_id: str, job: str, window: Window, *, now: datetime
) -> None:
    """Forget a window's cursor and record count: its next chain starts from the beginning."""
    moved = conn.execute(
        _window_update(merchant_id, job, window).values(
            cursor=None, cursor_issued_at=None, records=0, updated_at=now
        )
    )
    if moved.rowcount != 1:
        raise LookupError(f"no window {_window_name(merchant_id, job, window)}")


def split_window(
    conn: Connection,
    merchant_id: str,
    job: str,
    window: Window,
    pieces: Sequence[Window],
    *,
    now: datetime,
) -> None:
    """End ``window`` where ``pieces`` begin (done, its chain dropped) and add ``pieces``,
    which cover the rest of it, each to be read by a chain of its own."""
    if not pieces or pieces[-1].end != window.end or not window.start < pieces[0].start:
        raise ValueError("the pieces must cover the end of the window")
    for left, right in itertools.pairwise(pieces):
        if left.end != right.start:
            raise ValueError("the pieces must follow one another without gap or overlap")
    check_windows(pieces)
    _end_window(conn, merchant_id, job, window, at=pieces[0].start, now=now)
    _insert_windows(conn, merchant_id, job, pieces, now)


def carry_window(
    conn: Connection,
    merchant_id: str,
    job: str,
    window: Window,
    *,
    following: Window,
    joined: Window,
    now: datetime,
) -> None:
    """End ``window`` where ``joined`` begins (done, its chain dropped) and put ``joined`` in
    place of ``following``, a window no chain has begun: it covers the rest of the one and
    all of the other, so one chain reads both with one partial last page."""
    if not (
        window.start < joined.start < window.end == following.start and joined.end == following.end
    ):
        raise ValueError("the joined window must cover the rest of the window and the next one")
    check_windows([joined])
    _end_window(conn, merchant_id, job, window, at=joined.start, now=now)
    gone = conn.execute(
        delete(snapshot_windows).where(
            snapshot_windows.c.merchant_id == merchant_id,
            snapshot_windows.c.job == job,
            snapshot_windows.c.window_start == following.start,
            snapshot_windows.c.window_end == following.end,
            snapshot_windows.c.cursor.is_(None),
            snapshot_windows.c.records == 0,
            snapshot_windows.c.done.is_(False),
        )
    )
    if gone.rowcount != 1:
        raise LookupError(f"no unread window {_window_name(merchant_id, job, following)}")
    _insert_windows(conn, merchant_id, job, [joined], now)


def _end_window(
    conn: Connection, merchant_id: str, job: str, window: Window, *, at: datetime, now: datetime
) -> None:
    """``window`` ends at ``at``, done: what its chain read before that is all it holds."""
    moved = conn.execute(
        _window_update(merchant_id, job, window).values(
            window_end=at, cursor=None, cursor_issued_at=None, done=True, updated_at=now
        )
    )
    if moved.rowcount != 1:
        raise LookupError(f"no window {_window_name(merchant_id, job, window)}")


def advance_tail(
    conn: Connection,
    merchant_id: str,
    *,
    change_cursor: str,
    last_sequence: str | None,
    projection_as_of: datetime | None,
    now: datetime,
) -> None:
    """Move the change cursor past a committed page; a None keeps the stored value."""
    values: dict[str, Any] = {
        "change_cursor": change_cursor,
        "last_commit_at": now,
        "updated_at": now,
    }
    if last_sequence is not None and len(last_sequence) <= CURSOR_LENGTH:
        # A longer one is kept out (as ``record_revisions`` does), never a failed commit.
        values["last_sequence"] = last_sequence
    if projection_as_of is not None:
        values["last_projection_as_of"] = projection_as_of
    moved = conn.execute(
        update(sync_state).where(sync_state.c.merchant_id == merchant_id).values(values)
    )
    if moved.rowcount != 1:
        raise LookupError(f"no sync state for merchant {merchant_id!r}: start a rebuild")


def _insert_windows(
    conn: Connection, merchant_id: str, job: str, windows: Sequence[Window], now: datetime
) -> None:
    if not windows:
        return
    conn.execute(
        insert(snapshot_windows),
        [
            {
                "merchant_id": merchant_id,
                "job": job,
                "window_start": window.start,
                "window_end": window.end,
                "cursor": None,
                "cursor_issued_at": None,
                "done": False,
                "records": 0,
                "updated_at": now,
            }
            for window in windows
        ],
    )


def _window_update(merchant_id: str, job: str, window: Window) -> Any:
    return update(snapshot_windows).where(
        snapshot_windows.c.merchant_id == merchant_id,
        snapshot_windows.c.job == job,
        snapshot_windows.c.window_start == window.start,
        snapshot_windows.c.window_end == window.end,
    )


def _window_name(merchant_id: str, job: str, window: Window) -> str:
    return f"{job} [{window.start.isoformat()}, {window.end.isoformat()}) of {merchant_id!r}"


def _finish_rebuild_if_complete(conn: Connection, merchant_id: str, now: datetime) -> None:
    """The sync_state row is locked before counting the windows still open, so two windows
    finishing at once cannot both miss that they were the last."""
    conn.execute(
        select(sync_state.c.phase).where(sync_state.c.merchant_id == merchant_id).with_for_update()
    )
    open_windows = conn.execute(
        select(func.count())
        .select_from(snapshot_windows)
        .where(
            snapshot_windows.c.merchant_id == merchant_id,
            snapshot_windows.c.job == REBUILD_JOB,
            snapshot_windows.c.done.is_(False),
        )
    ).scalar_one()
    if open_windows == 0:
        conn.execute(
            update(sync_state)
            .where(sync_state.c.merchant_id == merchant_id)
            .values(phase=Phase.TAILING.value, updated_at=now)
        )


def _state(row: Row[Any]) -> SyncState:
    return SyncState(
        merchant_id=row.merchant_id,
        phase=Phase(row.phase),
        change_cursor=row.change_cursor,
        anchor_at=row.anchor_at,
        history_from=row.history_from,
        snapshot_to=row.snapshot_to,
        rebuilds=row.rebuilds,
        last_sequence=row.last_sequence,
        last_projection_as_of=row.last_projection_as_of,
        last_commit_at=row.last_commit_at,
    )


def all_windows(conn: Connection, merchant_id: str) -> list[WindowProgress]:
    """Every job's windows of the merchant, by job then start (a state export)."""
    jobs = conn.execute(
        select(snapshot_windows.c.job)
        .where(snapshot_windows.c.merchant_id == merchant_id)
        .distinct()
        .order_by(snapshot_windows.c.job)
    ).scalars()
    return [window for job in list(jobs) for window in load_windows(conn, merchant_id, job)]


def replace_all(
    conn: Connection,
    merchant_id: str,
    state: SyncState | None,
    windows: Sequence[WindowProgress],
    now: datetime,
) -> None:
    """Make the merchant's state and windows exactly these (a state import): the old rows
    deleted, the new ones inserted, in the caller's one transaction."""
    conn.execute(delete(snapshot_windows).where(snapshot_windows.c.merchant_id == merchant_id))
    conn.execute(delete(sync_state).where(sync_state.c.merchant_id == merchant_id))
    if state is not None:
        conn.execute(
            insert(sync_state).values(
                merchant_id=merchant_id,
                phase=state.phase.value,
                change_cursor=state.change_cursor,
                anchor_at=state.anchor_at,
                history_from=state.history_from,
                snapshot_to=state.snapshot_to,
                rebuilds=state.rebuilds,
                last_sequence=state.last_sequence,
                last_projection_as_of=state.last_projection_as_of,
                last_commit_at=state.last_commit_at,
                updated_at=now,
            )
        )
    if windows:
        conn.execute(
            insert(snapshot_windows),
            [
                {
                    "merchant_id": merchant_id,
                    "job": window.job,
                    "window_start": window.window.start,
                    "window_end": window.window.end,
                    "cursor": window.cursor,
                    "cursor_issued_at": window.cursor_issued_at,
                    "done": window.done,
                    "records": window.records,
                    "updated_at": now,
                }
                for window in windows
            ],
        )

"""The sync's persistent state as plain values: what the warehouse stores, the sync reads.

One ``SyncState`` per merchant holds the tail's position; one ``WindowProgress`` per snapshot
window holds that window's cursor.  A *job* names a set of windows: ``rebuild`` for the
daemon's snapshot of the history (replaced whole by a rebuild), ``backfill:<from>/<to>`` for a
one-shot range backfill and ``resync:<token>:<from>/<to>`` for a range read again on an
operator's demand; neither touches the tail's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from recordsync.core.models import Record, RecordChange, RejectedItem

REBUILD_JOB = "rebuild"


def backfill_job(start: datetime, end: datetime) -> str:
    return f"backfill:{start.isoformat()}/{end.isoformat()}"


def resync_job(start: datetime, end: datetime, token: str) -> str:
    """A resync's job: its own windows each time (``token``), so that a range read before
    is read again; a backfill of the same range resumes instead."""
    return f"resync:{token}:{start.isoformat()}/{end.isoformat()}"


class Phase(StrEnum):
    """Where a merchant's sync stands; the tail runs in both SNAPSHOT and TAILING."""

    SNAPSHOT = "snapshot"  # anchored; rebuild windows still being read
    TAILING = "tailing"  # every rebuild window done; only the tail remains


@dataclass(frozen=True, slots=True)
class SyncState:
    merchant_id: str
    phase: Phase
    change_cursor: str
    anchor_at: datetime  # projection_as_of of the from_now anchor: platform time
    history_from: datetime
    snapshot_to: datetime  # end (exclusive) of the rebuild's snapshot plan
    rebuilds: int  # how many times the state was rebuilt after an expired change cursor
    last_sequence: str | None
    last_projection_as_of: datetime | None
    last_commit_at: datetime | None


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open creation window ``[start, end)`` of at most 24 h."""

    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class WindowProgress:
    merchant_id: str
    job: str
    window: Window
    cursor: str | None  # None: not started, or restarted after 410
    cursor_issued_at: datetime | None  # platform time of the chain's first page
    done: bool
    records: int  # records committed from this window so far (for progress and status)


@dataclass(frozen=True, slots=True)
class StoredState:
    """A merchant's sync state as one warehouse holds it, or as a state file says the warehouse
    it came from held it: the ``sync_state`` row (None: never synced), every job's windows,
    and that warehouse's id (None: a file of an earlier version, which named none)."""

    state: SyncState | None
    windows: Sequence[WindowProgress]
    warehouse_id: str | None


@dataclass(frozen=True, slots=True)
class WindowPage:
    """One snapshot page to store with the cursor that covers it: ``next_cursor`` None and
    ``done`` when it was its window's last page; ``position`` names it in the quarantine."""

    job: str
    window: Window
    records: Sequence[Record]
    rejected: Sequence[RejectedItem]
    next_cursor: str | None
    cursor_issued_at: datetime | None
    done: bool
    position: str


@dataclass(frozen=True, slots=True)
class TailPage:
    """One change page to store with the change cursor that covers it.  ``records`` is what
    the upsert collapses (the changes' records); ``changes``, the page's changes, give the
    revision history each revision with its sequence and change time (without them it gets
    ``records`` with no sequence).  ``last_sequence`` and ``projection_as_of`` None keep the
    stored ones (an empty page, an answer without projection_as_of)."""

    records: Sequence[Record]
    rejected: Sequence[RejectedItem]
    next_cursor: str
    last_sequence: str | None
    projection_as_of: datetime | None
    position: str
    changes: Sequence[RecordChange] = ()


@dataclass(frozen=True, slots=True)
class EndpointAvailability:
    """Whether the platform serves an optional endpoint (``games``) to a merchant, as its
    holder just saw it; ``status`` and ``code`` are a refusal's (None: served, or
    no answer came at all), ``recheck_in`` the seconds until it is looked at again."""

    endpoint: str
    available: bool
    status: int | None = None
    code: str | None = None
    recheck_in: float | None = None

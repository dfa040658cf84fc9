"""Anchoring and rebuilds: where the tail starts and how far the snapshot reaches.

Spec, Records endpoints, "Rebuild without gaps", step 1: ``record-changes?from_now=true``
first, and its ``next_cursor`` kept, persisted with the plan of snapshot windows in one
transaction, so a restart never re-anchors by accident.  The snapshot's end comes from the
anchor page's ``projection_as_of`` (platform time), never from the local clock.  When the
change cursor expires, a rebuild anchors again and plans a new snapshot; the rows already
stored are kept (a higher revision still wins).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from recordsync.core.errors import ConfigurationError, ProtocolError
from recordsync.core.state import SyncState
from recordsync.platform.budget import Priority
from recordsync.sync.context import SyncContext
from recordsync.sync.indexes import defer_bi_indexes
from recordsync.sync.plan import describe_windows, plan_windows, snapshot_end


def load_or_anchor(ctx: SyncContext) -> SyncState:
    """The saved state if there is one; the first anchor otherwise."""
    state = ctx.warehouse.load_state()
    if state is not None:
        ctx.phase(state.phase.value)
        ctx.log.info("state_loaded", phase=state.phase.value, rebuilds=state.rebuilds)
        return state
    if ctx.options.history_from is None:
        raise ConfigurationError(
            "RECORDSYNC_HISTORY_FROM: required on the first start (no sync state yet)"
        )
    ctx.phase("anchoring")
    return anchor(ctx, ctx.options.history_from, rebuild_reason=None)


def rebuild(ctx: SyncContext, reason: str = "change cursor expired") -> SyncState:
    """A new anchor and a new snapshot of the history, after the change cursor expired (or on
    an operator's demand: ``recordsync merchant reset``).  The rows are kept."""
    state = ctx.warehouse.load_state()
    history_from = ctx.options.history_from or (state.history_from if state else None)
    if history_from is None:
        raise ConfigurationError("RECORDSYNC_HISTORY_FROM: required to rebuild the history")
    return anchor(ctx, history_from, rebuild_reason=reason)


def anchor(ctx: SyncContext, history_from: datetime, *, rebuild_reason: str | None) -> SyncState:
    """Anchor the change stream first, then plan the snapshot from the platform's time.

    Items on a ``from_now`` page (the spec says there are none) need no special care:
    they are changes of records that existed at the anchor, which the snapshot (read
    later, at a newer watermark) covers at the same or a higher revision.
    """
    page = ctx.client.changes(from_now=True, limit=1, priority=Priority.TAIL)
    if page.projection_as_of is None:
        raise ProtocolError(
            "the anchor page carries no projection_as_of: the snapshot end cannot be "
            "derived from the platform's time",
            endpoint="record-changes",
            request_id=page.request_id,
        )
    end = snapshot_end(page.projection_as_of, ctx.options.snapshot_overlap)
    windows = plan_windows(history_from, end) if history_from < end else []
    with ctx.writer:
        state = ctx.warehouse.start_rebuild(
            change_cursor=page.next_cursor,
            anchor_at=page.projection_as_of,
            history_from=history_from,
            snapshot_to=end,
            windows=windows,
            defer_bi_indexes=defer_bi_indexes(ctx),
        )
    ctx.phase(state.phase.value)
    fields: dict[str, Any] = {
        "anchor_at": page.projection_as_of.isoformat(),
        "snapshot": describe_windows(windows),
        "request_id": page.request_id,
    }
    if rebuild_reason is None:
        ctx.log.info("anchored", **fields)
    else:
        ctx.observer.rebuild_started(rebuild_reason)
        ctx.log.error("rebuild_started", reason=rebuild_reason, rebuilds=state.rebuilds, **fields)
    return state


def reset_plan(state: SyncState, windows: int) -> dict[str, Any]:
    """What a reset left: the new anchor and the plan the rebuild reads, as plain data (the
    reset's result, whether the holder ran it or the command did)."""
    return {
        "anchor_at": state.anchor_at.isoformat(),
        "history_from": state.history_from.isoformat(),
        "snapshot_to": state.snapshot_to.isoformat(),
        "windows": windows,
        "rebuilds": state.rebuilds,
    }

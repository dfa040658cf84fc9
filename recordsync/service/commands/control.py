"""``recordsync merchant pause|resume``: act on one merchant across the fleet, nothing restarted.

A pause is a row in the warehouse (``warehouse.controls``), which every replica reads at each
fleet tick: its holder stops the merchant's sync (the page in hand committed) and lets go, and
no replica takes it until ``resume``; it outlasts restarts, rebalances and the replica that was
told.  With no daemon running there is nothing to stop: the row is all.  The command then
watches the leases until nobody holds the merchant (at most ``RELEASE_WAIT``: a tick and the
page in hand), so that its last line is a fact, not a hope.  ``resume`` clears the row and,
when a live replica is configured with the merchant, waits until one holds it again.

A pause has an owner: who paused first, recorded as the operator (the process's user and
host) and the database account the command ran as, which the database vouches for (the OS
user does not: any process may call itself anything).  Another operator's ``resume`` is
refused unless ``--force`` says so, and then says whose pause it ended: a pause taken for an
incident is not lifted by someone who did not know of it.  Who may pause or resume at all is
the database's grants alone (docs/operations.md, "Who may run what").

Neither command migrates: a schema behind this version is refused in one line naming
``recordsync migrate`` (a previous version's replicas, mid-rollout, would not read the row).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import structlog

from recordsync.core.settings import Settings
from recordsync.service.commands.holder_versions import refuse_unless_holder_obeys_pause
from recordsync.service.commands.operator import operator, watching_session
from recordsync.warehouse import Pause, Warehouse

log = structlog.get_logger("recordsync")

# A holder lets go at its next tick (2 s) once the page in hand is committed (seconds), and a
# dead holder's lock is freed by the database within the lease: well inside 30 s.
RELEASE_WAIT: Final = 30.0
# A live replica takes a resumed merchant at its next tick, after the hand-overs it plans.
TAKE_WAIT: Final = 20.0
LOOK_EVERY: Final = 0.5


def _open(settings: Settings) -> tuple[Warehouse, str]:
    """The warehouse at this version's schema (never migrated here: ``SchemaVersionError``
    names ``recordsync migrate``), and who acts on it."""
    warehouse = Warehouse.connect(settings.database_url, lease_seconds=settings.lease_seconds)
    try:
        warehouse.check_schema()
        return warehouse, operator(warehouse.controls.database_account())
    except BaseException:
        warehouse.close()
        raise


def pause_merchant(
    settings: Settings,
    merchant_id: str,
    *,
    reason: str | None,
    wait: float = RELEASE_WAIT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Pause ``merchant_id`` and wait until no replica holds it; 0 once nobody does, 1 when
    a holder still has it after ``wait`` (the pause stands: it lets go at its next tick)."""
    merchant = settings.merchant(merchant_id)
    warehouse, me = _open(settings)
    try:
        session = watching_session(warehouse)
        try:
            refuse_unless_holder_obeys_pause(session, merchant.merchant_id)
            pause = warehouse.controls.pause(merchant.merchant_id, by=me, reason=reason)
            log.info("merchant_paused", merchant_id=merchant.merchant_id, by=me, owner=pause.by)
            started = clock()
            holder = session.holders().get(merchant.merchant_id)
            while holder is not None and clock() - started < wait:
                sleep(LOOK_EVERY)
                holder = session.holders().get(merchant.merchant_id)
            waited = clock() - started
        finally:
            session.close()
    finally:
        warehouse.close()
    said = _said(pause)
    ending = f"`recordsync merchant resume {merchant.merchant_id}` ends it"
    if pause.by != me:  # paused already, by another operator: their pause, as it was
        ending = f"the pause is {pause.by}'s: theirs ends it (anyone else's needs --force)"
    if holder is not None:
        print(  # noqa: T201 - the command's last line
            f"merchant {merchant.merchant_id} paused ({said}), but replica {holder} still "
            f"holds it after {wait:.0f} s: it lets go at its next tick; `recordsync status` "
            "shows when"
        )
        return 1
    let_go = f"its holder let go after {waited:.1f} s" if waited >= LOOK_EVERY else "nobody held it"
    print(  # noqa: T201 - the command's last line
        f"merchant {merchant.merchant_id} paused ({said}): no replica syncs it ({let_go}); {ending}"
    )
    return 0


def resume_merchant(
    settings: Settings,
    merchant_id: str,
    *,
    force: bool = False,
    wait: float = TAKE_WAIT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Resume ``merchant_id``; when a live replica is configured with it, wait until one
    holds it again.  0 once held (or when no daemon runs, said so), 1 when not held after
    ``wait``, and 1 for another operator's pause without ``force`` (left standing)."""
    merchant = settings.merchant(merchant_id)
    warehouse, me = _open(settings)
    try:
        found = warehouse.controls.resume(
            merchant.merchant_id, by=me, may_end=lambda pause: force or pause.by == me
        )
        if found is None:
            print(f"merchant {merchant.merchant_id} was not paused: nothing to do")  # noqa: T201
            return 0
        ended = found.pause
        if not found.ended:
            print(  # noqa: T201 - the command's last line
                f"merchant {merchant.merchant_id} stays paused: the pause is {ended.by}'s, "
                f"not yours ({me}), {_said(ended)}; add --force to end their pause"
            )
            return 1
        log.info(
            "merchant_resumed",
            merchant_id=merchant.merchant_id,
            paused_since=ended.since,
            owner=ended.by,
            by=me,
            forced=ended.by != me,
        )
        session = watching_session(warehouse)
        try:
            takers = [
                replica
                for replica, merchants in session.live_replicas(
                    settings.heartbeat_stale_after
                ).items()
                if merchants is None or merchant.merchant_id in merchants
            ]
            started = clock()
            holder = session.holders().get(merchant.merchant_id)
            while takers and holder is None and clock() - started < wait:
                sleep(LOOK_EVERY)
                holder = session.holders().get(merchant.merchant_id)
            waited = clock() - started
        finally:
            session.close()
    finally:
        warehouse.close()
    resumed = f"merchant {merchant.merchant_id} resumed (it was paused {_said(ended)})"
    if ended.by != me:
        resumed = (
            f"merchant {merchant.merchant_id} resumed with --force, ending {ended.by}'s pause "
            f"({_said(ended)})"
        )
    if holder is not None:
        print(f"{resumed}: replica {holder} syncs it again after {waited:.1f} s")  # noqa: T201
        return 0
    if not takers:
        print(  # noqa: T201
            f"{resumed}: no daemon configured with it is running; the next one to start syncs it"
        )
        return 0
    print(  # noqa: T201
        f"{resumed}, but no replica has taken it after {wait:.0f} s: `recordsync status` shows "
        "who holds what; the replicas' logs say why"
    )
    return 1


def _said(pause: Pause) -> str:
    why = f", {pause.reason}" if pause.reason else ""
    return f"since {pause.since.isoformat(timespec='seconds')} by {pause.by}{why}"

"""``recordsync merchant reset ID --yes``: re-anchor the change stream and rebuild from
history_from, keeping the rows: the 410 recovery (``sync.anchor.rebuild``), on demand.

With a daemon holding the merchant the reset is handed to it (a ``sync_requests`` row of kind
``reset``): its engine ends the generation running, the pages in hand committed, anchors anew
with ``from_now`` and plans the rebuild's windows, which it then reads beside the tail.  With
none, the command takes the lease and re-anchors itself; the next daemon to run reads the
plan.  Interrupted (SIGINT, SIGTERM), the command cancels its request, and a reset request
nobody started within 20 s expires (``requests.book.START_WITHIN``): a reset never runs
later for nobody.  Either way nothing is deleted: the rebuild upserts every record again at
its highest revision, so a row never goes back and the dashboards stay whole.
"""

from __future__ import annotations

from typing import Any

import orjson
import structlog

from recordsync.core.errors import ConfigurationError, RecordSyncError, ShutdownRequestedError
from recordsync.core.settings import Settings
from recordsync.core.state import REBUILD_JOB
from recordsync.core.stopping import Stopper
from recordsync.logs import process_context
from recordsync.service.commands.handover import DoneThere, HeldHere
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.service.signals import stop_on_signals
from recordsync.sync.anchor import reset_plan
from recordsync.warehouse import RequestKind

log = structlog.get_logger("recordsync")


def run_reset(settings: Settings, merchant_id: str, *, yes: bool) -> int:
    """Reset ``merchant_id`` (module docstring); ``yes`` is the operator's confirmation."""
    merchant = settings.merchant(merchant_id)
    if not yes:
        raise ConfigurationError(
            f"merchant reset {merchant.merchant_id}: it re-anchors the change stream and reads "
            "the whole history again from history_from (the rows are kept): add --yes"
        )
    stopper = Stopper()
    process_context.update(merchant_id=merchant.merchant_id, phase="reset")
    command = MerchantCommand(settings, merchant.merchant_id, stopper, name="reset", migrate=False)
    with stop_on_signals(stopper) as signals, command:
        state = command.warehouse.state.load_state(merchant.merchant_id)
        if state is None:
            raise RecordSyncError(
                f"merchant {merchant.merchant_id} was never synced: there is nothing to reset "
                "(its first start anchors it)"
            )
        handover = command.hand_over(
            RequestKind.RESET,
            ask=lambda: command.warehouse.requests.ask(
                merchant.merchant_id, RequestKind.RESET, state.history_from, state.snapshot_to
            ),
            what="reset",
            handed_over=lambda request_id: log.info("reset_handed_over", request_id=request_id),
        )

        def here(held: HeldHere, work: Stopper) -> dict[str, Any]:
            anchored = command.engine(held.epoch, work).reanchor()
            windows = command.warehouse.state.load_windows(merchant.merchant_id, REBUILD_JOB)
            return reset_plan(anchored, len(windows))

        try:
            outcome = handover.run(here)
        except ShutdownRequestedError:
            what_now = handover.interrupted() or "nothing was reset"
            log.info("reset_interrupted", action=what_now)
            interrupted = signals.interrupted(what_now)
            if interrupted is not None:
                raise interrupted from None
            raise
        if isinstance(outcome, DoneThere):
            plan: dict[str, Any] = orjson.loads(outcome.request.result or "{}")
            where = f"by replica {outcome.request.holder}, which reads them beside its tail"
        else:
            plan = outcome
            where = "here (no daemon holds it); the next daemon to run reads them"
    log.info("reset_finished", **plan)
    print(  # noqa: T201 - the command's last line
        f"merchant {merchant.merchant_id} reset: re-anchored at {plan.get('anchor_at')}, "
        f"{plan.get('windows')} windows from {plan.get('history_from')} to read again, planned "
        f"{where}; the rows are kept"
    )
    return 0

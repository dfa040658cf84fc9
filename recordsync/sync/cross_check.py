"""The cross-check of round-end notifications: every round the platform announced must reach
the warehouse.

A periodic job of the daemon, every ``cross_check_interval`` seconds while round-end
notifications are received: the rounds announced (``ROUND_ENDED``) more than ``event_grace``
seconds ago that ``records`` still lacks are counted (``rounds_checked``, the metric
``recordsync_rounds_announced_missing`` and its alert) and logged with their ids.  The
warehouse marks every round it finds, so a round that arrives late drops out of the count at
the next check by itself.  Nothing is read from the platform: this asks the warehouse only.
"""

from __future__ import annotations

from typing import Final

from recordsync.sync.context import SyncContext
from recordsync.sync.resilience import StepRunner

SHOWN_ROUNDS: Final = 50  # round ids written in one log line; the count is always complete


class CrossCheck:
    """One merchant's cross-check; remembers whether the last one found rounds missing, so
    that their arrival is logged once."""

    def __init__(self, ctx: SyncContext) -> None:
        self._ctx = ctx
        self._missing = 0

    def run(self, runner: StepRunner) -> None:
        """One check; ``runner`` is the job's own (a warehouse outage is waited out or, on a
        shared pool, deferred)."""
        ctx = self._ctx
        grace = ctx.options.event_grace
        if grace is None:
            return
        missing = runner.run(
            lambda: ctx.warehouse.rounds_announced_missing(grace),
            what="cross-check",
        )
        ctx.observer.rounds_checked(len(missing))
        if missing:
            ctx.log.error(
                "rounds_announced_missing",
                rounds=len(missing),
                round_ids=missing[:SHOWN_ROUNDS],
                grace=grace,
                action="alert: the platform announced these rounds and record-changes has "
                "not brought them; compare with the platform",
            )
        elif self._missing:
            ctx.log.info("rounds_announced_arrived", rounds=self._missing)
        self._missing = len(missing)

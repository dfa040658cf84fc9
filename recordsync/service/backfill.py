"""``recordsync backfill``: a one-shot snapshot of a creation range, resumable, beside the tail."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from datetime import datetime

import structlog

from recordsync.core.errors import ShutdownRequestedError
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.logs import process_context
from recordsync.service.app import open_app
from recordsync.service.progress import RichProgress
from recordsync.service.signals import stop_on_signals

log = structlog.get_logger("recordsync")


def run_backfill(
    settings: Settings, start: datetime, end: datetime, *, merchant_id: str | None = None
) -> int:
    """One-shot snapshot of a range of ``merchant_id`` (needed when several are configured):
    a progress bar on a terminal, log lines otherwise.  The secret is read once."""
    merchant = settings.merchant(merchant_id)
    stopper = Stopper()
    process_context.update(merchant_id=merchant.merchant_id, phase="backfill")
    progress = RichProgress() if sys.stdout.isatty() else None
    try:
        with (
            stop_on_signals(stopper),
            open_app(
                settings, merchant_id=merchant.merchant_id, stopper=stopper, observer=progress
            ) as app,
            progress or nullcontext(),
        ):
            result = app.engine.backfill(start, end)
    except ShutdownRequestedError:
        log.info("backfill_interrupted", action="run the same command again to resume")
        return 0
    if stopper.stopped:
        log.info(
            "backfill_interrupted",
            job=result.job,
            records=result.records,
            action="run the same command again to resume",
        )
        return 0
    log.info("backfill_finished", job=result.job, windows=result.windows, records=result.records)
    return 0

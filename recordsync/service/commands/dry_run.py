"""``--dry-run`` of ``backfill``, ``verify --repair``, ``merchant resync`` and ``merchant reset``:
the windows, the requests and the time at the merchant's limit, and provably nothing written.

The warehouse is read through ``WarehouseReader``, whose every session refuses writes
(a read-only transaction on PostgreSQL and MariaDB, ``query_only`` on SQLite), so a dry run
cannot write even by mistake; the platform is asked for its capabilities only (the limit),
never for records or changes.  The refusals of the real command apply first (a paused
merchant, a reset of a merchant never synced), so a dry run says what the command would do.
"""

from __future__ import annotations

from datetime import datetime

from recordsync.core.errors import ConfigurationError, RecordSyncError
from recordsync.core.settings import Settings
from recordsync.core.state import Window
from recordsync.core.stopping import Stopper
from recordsync.service.commands.handover import refuse_if_paused
from recordsync.service.runtime import Purpose, merchant_client, read_limits
from recordsync.service.secrets import SecretKeeper
from recordsync.sync import dry_run
from recordsync.sync.plan import plan_windows, snapshot_end
from recordsync.warehouse.reader import WarehouseReader


def dry_run_range(
    settings: Settings, what: str, start: datetime, end: datetime, *, merchant_id: str | None
) -> int:
    """The plan of a range job (``what``: backfill, resync, verify --repair) on ``[start, end)``."""
    if not start < end:
        raise ConfigurationError(f"{what}: --from must be earlier than --to")
    merchant = settings.merchant(merchant_id)
    reader = WarehouseReader.open(settings.database_url)
    try:
        refuse_if_paused(reader.paused, merchant.merchant_id, what=what)  # as the command does
        windows = plan_windows(start, end)
        stored = [reader.count_created(merchant.merchant_id, w.start, w.end) for w in windows]
    finally:
        reader.close()
    title = f"{what} of {merchant.merchant_id} [{start.isoformat()}, {end.isoformat()})"
    return _print(settings, merchant_id, title, windows, stored, extra_requests=0)


def dry_run_reset(settings: Settings, merchant_id: str) -> int:
    """The plan of a reset: an anchor, then the history from history_from to about now (the
    platform's last word the warehouse holds, never the local clock)."""
    merchant = settings.merchant(merchant_id)
    reader = WarehouseReader.open(settings.database_url)
    try:
        refuse_if_paused(reader.paused, merchant.merchant_id, what="reset")
        state = reader.load_state(merchant.merchant_id)
        if state is None:
            raise RecordSyncError(
                f"merchant {merchant.merchant_id} was never synced: there is nothing to reset"
            )
        end = snapshot_end(state.last_projection_as_of or state.anchor_at)
        windows = plan_windows(state.history_from, end)
        stored = [reader.count_created(merchant.merchant_id, w.start, w.end) for w in windows]
    finally:
        reader.close()
    title = f"reset of {merchant.merchant_id} (history from {state.history_from.isoformat()})"
    return _print(settings, merchant_id, title, windows, stored, extra_requests=1)


def _print(
    settings: Settings,
    merchant_id: str | None,
    title: str,
    windows: list[Window],
    stored: list[int],
    *,
    extra_requests: int,
) -> int:
    merchant = settings.merchant(merchant_id)
    stopper = Stopper()
    if merchant.secret is None:
        raise ConfigurationError("the platform settings were not loaded for this command")
    secrets = SecretKeeper({merchant.merchant_id: merchant.secret}, overlap=settings.secret_overlap)
    with merchant_client(
        settings,
        merchant,
        secrets=secrets,
        stopper=stopper,
        unreachable_after=settings.unreachable_timeout,
    ) as client:
        limits = read_limits(client, Purpose.COMMAND)
    plan = dry_run.estimate(
        title,
        windows,
        stored,
        page_size=min(settings.page_size, limits.max_page_size),
        limits=limits,
        extra_requests=extra_requests,
    )
    for line in dry_run.lines(plan):
        print(line)  # noqa: T201 - the command's output
    return 0

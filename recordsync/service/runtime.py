"""One merchant's runtime, built one way for every command: its client with its two budgets
(``merchant_client``), then what its engines share (``merchant_engines``): the platform's limits
read once, the engines' options, the merchant's demand; a daemon's sync is its tail on the
merchant's store (``merchant_sync``).

The daemon (``daemon.merchant_syncs``), the one-shot commands (``backfill``, ``verify``,
``reset``, through ``commands.merchant_command``) and the demo all build a merchant's engines
here, so that what a test drives in process is what ``recordsync run`` runs.  What differs
between them is said by a parameter, never by a second copy:

- ``Share``: a daemon shares its worker threads among its merchants, and each merchant's
  snapshot gets its share of them; a command syncs one merchant alone.
- ``Purpose.COMMAND``: a one-shot job ends at once on what no retry heals (a wrong secret, a
  skewed clock, a base URL that redirects) and gives up on a platform it cannot
  reach after ``unreachable_timeout``; the daemon reports the same failures and keeps trying,
  slowly, since one merchant's wrong secret must never hold the others back.
- ``receives_events``: only a daemon with its notification port open cross-checks rounds.

A job beside the sync (a backfill, a resync, a reset: handed to the holder, or run by a
command holding the lease) runs on an engine built by the same function on either side
(``MerchantEngines.job_engine``), so it spends the same budget and registers with the
merchant's one demand: the tail gives the budget to it as to the rebuild.

Every budget starts cold: the holder before us (another replica, or this process's previous
sync of the merchant) may have spent the last window, and the platform counts both against the
same merchant.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog

from recordsync.core.errors import (
    AuthenticationError,
    ClockSkewError,
    UnexpectedRedirectError,
)
from recordsync.core.models import DEFAULT_LIMITS, Limits
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import RateBudget, default_query_budget
from recordsync.platform.client import ClientObserver, PlatformClient
from recordsync.service.secrets import SecretKeeper
from recordsync.sync.demand import SnapshotDemand
from recordsync.sync.engine import SyncEngine
from recordsync.sync.events import SyncObserver
from recordsync.sync.jobs import JobHost
from recordsync.sync.options import DEFAULT_CROSS_CHECK_INTERVAL, SyncOptions
from recordsync.sync.tail_pace import TailPacing
from recordsync.sync.windows import MAX_CHAINS
from recordsync.warehouse import MerchantStore, Warehouse

log = structlog.get_logger("recordsync")


class Purpose(enum.Enum):
    """What the merchant's sync is for, which decides how a failure at start ends."""

    DAEMON = "daemon"
    COMMAND = "command"


@dataclass(frozen=True, slots=True)
class Share:
    """A daemon's worker threads, shared among the merchants it is configured with."""

    worker_threads: int
    merchants: int


def merchant_client(
    settings: Settings,
    merchant: MerchantSettings,
    *,
    secrets: SecretKeeper,
    stopper: Stopper,
    observer: ClientObserver | None = None,
    cold_since: float | None = None,
    unreachable_after: float | None = None,
) -> PlatformClient:
    """The merchant's client: signing with the keeper's current secret, its record budget
    (cold, the spec's default limit until capabilities say otherwise) and its query budget
    for the catalogue.  ``cold_since``: see ``RateBudget``; ``unreachable_after`` (a
    command's ``unreachable_timeout``): see ``PlatformClient``."""
    assert merchant.base_url is not None
    budget = RateBudget(
        DEFAULT_LIMITS.record_requests,
        DEFAULT_LIMITS.record_seconds,
        margin=settings.rate_margin,
        sleep=stopper.sleep,
        cold_start=True,
        cold_since=cold_since,
    )
    return PlatformClient(
        base_url=merchant.base_url,
        merchant_id=merchant.merchant_id,
        secret=secrets.provider(merchant.merchant_id),
        budget=budget,
        # The catalogue's own budget (capabilities' query limit), never the record one.
        query_budget=default_query_budget(margin=settings.rate_margin, sleep=stopper.sleep),
        timeout=settings.http_timeout,
        verify=settings.verify,
        sleep=stopper.sleep,
        observer=observer,
        unreachable_after=unreachable_after,
    )


def read_limits(client: PlatformClient, purpose: Purpose, *, logger: Any = log) -> Limits:
    """The platform's limits, the budgets resized to them.

    A capabilities answer that fails otherwise leaves the spec's defaults (the client says
    so: ``capabilities_unavailable``); the records may still be readable.  What no
    retry heals (a wrong secret, a skewed clock, a redirect) ends a command at once; a daemon
    logs it on ``logger`` (the merchant's bound logger) and goes on with the defaults, and its
    first step reports the same failure again and keeps trying, slowly, on its own.
    """
    try:
        return client.apply_capabilities()
    except (AuthenticationError, ClockSkewError, UnexpectedRedirectError) as exc:
        if purpose is Purpose.COMMAND:
            raise
        logger.error(  # noqa: TRY400 - the message is the diagnosis; no traceback
            "capabilities_failed", error=str(exc), code=exc.code, request_id=exc.request_id
        )
        return DEFAULT_LIMITS


def sync_options(
    settings: Settings,
    merchant: MerchantSettings,
    limits: Limits,
    purpose: Purpose,
    *,
    share: Share | None = None,
    receives_events: bool = False,
    stop_when_caught_up: bool = False,
) -> SyncOptions:
    """The engine's options for the merchant: the settings, bounded by the platform's limits
    and, in a daemon, by the merchant's share of the worker threads."""
    concurrency, most_chains = settings.snapshot_concurrency, None
    if share is not None:
        concurrency = fair_concurrency(concurrency, share.worker_threads, share.merchants)
        most_chains = fair_concurrency(MAX_CHAINS, share.worker_threads, share.merchants)
    return SyncOptions(
        merchant_id=merchant.merchant_id,
        history_from=merchant.history_from,
        page_size=min(settings.page_size, limits.max_page_size),
        tail_pacing=TailPacing(
            interval=settings.poll_interval,
            ceiling=settings.poll_ceiling,
            # Notifications wake the tail: when idle, it only polls for safety.
            safety=settings.safety_poll if receives_events else None,
            snapshot_spacing=settings.snapshot_tail_interval,
        ),
        snapshot_concurrency=concurrency,
        snapshot_most_chains=most_chains,
        drift_interval=settings.drift_check_interval or None,
        revision_retention=(
            timedelta(days=settings.revision_retention) if settings.revision_retention else None
        ),
        catalogue_interval=settings.catalogue_interval or None,
        idle_commit_interval=settings.idle_commit_interval,
        # Round-end notifications are received: cross-check them with the records.
        event_grace=settings.event_grace if receives_events else None,
        # A missing round shows within 1.25 graces at most, at most once a minute.
        cross_check_interval=min(DEFAULT_CROSS_CHECK_INTERVAL, settings.event_grace / 4),
        stop_when_caught_up=stop_when_caught_up,
        give_up_unreachable=settings.unreachable_timeout if purpose is Purpose.COMMAND else None,
    )


@dataclass(frozen=True, slots=True)
class MerchantEngines:
    """What every engine of a merchant in this process shares: the client (so the rate
    budget), the options, the pools and the merchant's one demand, which the tail reads to
    give the budget to the jobs reading windows, whichever engine runs them.  Every engine of
    the service is built here: the tail (``tail``) and the jobs beside it (``job_engine``)."""

    client: PlatformClient
    options: SyncOptions
    demand: SnapshotDemand
    host: JobHost | None = None

    def tail(
        self, store: MerchantStore, *, stopper: Stopper, observer: SyncObserver | None = None
    ) -> SyncEngine:
        """The merchant's sync on ``store``: its tail, with the game catalogue a job beside it
        on the same client and store."""
        return self._engine(store, stopper=stopper, observer=observer, catalogue=True)

    def job_engine(
        self,
        warehouse: Warehouse,
        epoch: int,
        *,
        stopper: Stopper,
        observer: SyncObserver | None = None,
    ) -> SyncEngine:
        """An engine for one job of the merchant beside its sync (a backfill, a resync, a
        reset: run by the holder, or by a command holding the lease), every commit fenced by
        the holder's ``epoch`` and stopped by ``stopper``: its own log phase and stop, the
        budget and the demand shared."""
        store = warehouse.fenced(self.options.merchant_id, epoch)
        return self._engine(store, stopper=stopper, observer=observer, catalogue=False)

    def _engine(
        self,
        store: MerchantStore,
        *,
        stopper: Stopper,
        observer: SyncObserver | None,
        catalogue: bool,
    ) -> SyncEngine:
        return SyncEngine(
            client=self.client,
            warehouse=store,
            options=self.options,
            stopper=stopper,
            observer=observer,
            host=self.host,
            catalogue=(self.client, store) if catalogue else None,
            demand=self.demand,
        )


@dataclass(frozen=True, slots=True)
class MerchantSync:
    """A merchant's sync as built for its purpose: its tail's engine, and what every other
    engine of the merchant in this process shares with it (``engines``)."""

    engine: SyncEngine
    engines: MerchantEngines


def merchant_engines(
    settings: Settings,
    merchant: MerchantSettings,
    client: PlatformClient,
    purpose: Purpose,
    *,
    host: JobHost | None = None,
    share: Share | None = None,
    receives_events: bool = False,
    stop_when_caught_up: bool = False,
    demand: SnapshotDemand | None = None,
    logger: Any = log,
) -> MerchantEngines:
    """What the merchant's engines share, on ``client``: the platform's limits read once
    (``read_limits``), the options sized to them and to the share (``sync_options``).  A
    command builds only the engines it runs (``MerchantCommand``); a daemon its tail
    (``merchant_sync``) and the jobs beside it.

    ``demand``: the merchant's demand when it outlives these engines (a daemon's held
    merchant, whose sync is built again after a bug while its requests run on); None: a new
    one."""
    limits = read_limits(client, purpose, logger=logger)
    options = sync_options(
        settings,
        merchant,
        limits,
        purpose,
        share=share,
        receives_events=receives_events,
        stop_when_caught_up=stop_when_caught_up,
    )
    return MerchantEngines(client, options, demand or SnapshotDemand(), host)


def merchant_sync(
    settings: Settings,
    merchant: MerchantSettings,
    client: PlatformClient,
    store: MerchantStore,
    purpose: Purpose,
    *,
    stopper: Stopper,
    observer: SyncObserver | None = None,
    host: JobHost | None = None,
    share: Share | None = None,
    receives_events: bool = False,
    demand: SnapshotDemand | None = None,
    logger: Any = log,
) -> MerchantSync:
    """The merchant's tail on ``client`` and ``store`` (fenced by the holder's epoch), and
    what its jobs share with it (``merchant_engines``)."""
    engines = merchant_engines(
        settings,
        merchant,
        client,
        purpose,
        host=host,
        share=share,
        receives_events=receives_events,
        demand=demand,
        logger=logger,
    )
    return MerchantSync(engines.tail(store, stopper=stopper, observer=observer), engines)


def fair_concurrency(wanted: int, worker_threads: int, merchants: int) -> int:
    """Snapshot workers per merchant on a shared host: ``wanted``, but no more than each
    merchant's share of the worker threads (at least one).  Otherwise the first merchants to
    start a snapshot take every thread and the others wait for a whole window to end: with
    10 merchants and 16 threads, 8 snapshotted and 2 waited (bench/fleet.py)."""
    return max(1, min(wanted, worker_threads // max(merchants, 1)))


def warn_settings(settings: Settings) -> None:
    """Say what the settings loader found worth a warning (a world-readable secret file), at
    the start of every command and of the daemon."""
    for warning in settings.warnings:
        log.warning("configuration_warning", detail=warning)

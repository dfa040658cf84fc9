"""Builds the running parts of one merchant from the settings: one client, one budget, one
warehouse, one engine.

Used by ``backfill``, ``verify`` and ``demo``; the daemon builds each merchant's parts with the
same functions (``runtime``), so the one-shot paths and ``run`` differ only where a parameter
says so.  The client signs with the keeper's current secret of the
merchant: the daemon passes its keeper, whose watcher reads rotated secrets; without one the
secret is read once, which is all a one-shot command needs.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from recordsync import PROCESS_STARTED
from recordsync.core.errors import ConfigurationError
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.stopping import Stopper
from recordsync.platform.client import ClientObserver, PlatformClient
from recordsync.service.runtime import MerchantSync, Purpose, merchant_client, merchant_sync
from recordsync.service.secrets import SecretKeeper
from recordsync.sync.engine import SyncEngine, SyncOptions
from recordsync.sync.events import SyncObserver
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")


@dataclass
class App:
    settings: Settings
    merchant: MerchantSettings
    client: PlatformClient
    warehouse: Warehouse
    sync: MerchantSync
    stopper: Stopper
    observer: SyncObserver | None

    @property
    def engine(self) -> SyncEngine:
        """The merchant's sync: its tail, when the command runs one (the demo)."""
        return self.sync.engine

    @property
    def options(self) -> SyncOptions:
        return self.sync.options

    def engine_for(self, stopper: Stopper, *, epoch: int | None = None) -> SyncEngine:
        """A fresh engine for one job stopped by ``stopper`` (``MerchantSync.job_engine``: the
        client, the options and the merchant's demand shared with ``engine``); with ``epoch``,
        every commit is fenced by the merchant's lease epoch (the lease was taken by this
        process)."""
        merchant_id = self.merchant.merchant_id
        store = (
            self.warehouse.for_merchant(merchant_id)
            if epoch is None
            else self.warehouse.fenced(merchant_id, epoch)
        )
        return self.sync.job_engine(store, stopper=stopper, observer=self.observer)


@contextmanager
def open_app(
    settings: Settings,
    *,
    merchant_id: str | None = None,
    secrets: SecretKeeper | None = None,
    stopper: Stopper | None = None,
    observer: SyncObserver | None = None,
    client_observer: ClientObserver | None = None,
    stop_when_caught_up: bool = False,
    migrate: bool = True,
) -> Iterator[App]:
    """The parts for ``merchant_id`` (the only merchant when None), closed on exit.

    ``migrate`` False: the schema is checked, never upgraded (the control commands: during a
    rolling upgrade only ``recordsync migrate`` may move it under the older replicas)."""
    merchant = settings.merchant(merchant_id)
    if merchant.base_url is None or merchant.secret is None:
        raise ConfigurationError("the platform settings were not loaded for this command")
    if secrets is None:
        secrets = SecretKeeper(
            {merchant.merchant_id: merchant.secret}, overlap=settings.secret_overlap
        )
    stopper = stopper or Stopper()
    client = merchant_client(
        settings,
        merchant,
        secrets=secrets,
        stopper=stopper,
        observer=client_observer,
        cold_since=_cold_since(),
    )
    warehouse = Warehouse.connect(settings.database_url, keep_revisions=settings.keep_revisions)
    try:
        # A warehouse that is down at start-up is waited for, like one that goes down later.
        StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=False).run(
            warehouse.migrate if migrate else warehouse.check_schema,
            what="migrate" if migrate else "check the schema",
        )
        store = warehouse.for_merchant(merchant.merchant_id)
        sync = merchant_sync(
            settings,
            merchant,
            client,
            store,
            Purpose.COMMAND,
            stopper=stopper,
            observer=observer,
            stop_when_caught_up=stop_when_caught_up,
        )
        _settle_heap()
        yield App(settings, merchant, client, warehouse, sync, stopper, observer)
    finally:
        client.close()
        warehouse.close()


_HEAP_SETTLED: list[bool] = [False]
_BUDGET_MADE: list[bool] = [False]


def _cold_since() -> float | None:
    """Where the record budget's cold start counts from: the process's start for its first
    app, so the pause overlaps the imports, migrations and capabilities instead of
    following them (about 0.5 s of every ``recordsync backfill``, bench/README.md 1b); any
    later app of the same process from its own creation, since an earlier one may have
    just sent requests for the same merchant."""
    if _BUDGET_MADE[0]:
        return None
    _BUDGET_MADE[0] = True
    return PROCESS_STARTED


def _settle_heap() -> None:
    """Once per process, when the parts are built: what start-up made is moved out of the
    collector's way (``gc.freeze``).

    A sync allocates every record's objects (a Record, its Decimals and datetimes) and keeps
    them until its page commits, long enough for the collector to promote them and run full
    collections, each of which walked the ~100 000 objects of the imported libraries again:
    0.61 s of the collector's 1.38 s over a 400 000-record PostgreSQL ingest, 0.15 s frozen
    (bench/README.md).  Frozen objects are only ever freed by reference counting,
    which is how module-level state lives anyway.
    """
    if _HEAP_SETTLED[0]:
        return
    _HEAP_SETTLED[0] = True
    gc.collect()
    gc.freeze()


def warn_settings(settings: Settings) -> None:
    """Say what the settings loader found worth a warning (a world-readable secret file)."""
    for warning in settings.warnings:
        log.warning("configuration_warning", detail=warning)

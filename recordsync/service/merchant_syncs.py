"""The merchants this process syncs: one sync per merchant it holds, started under the
merchant's lease epoch and stopped when the fleet hands it over (``fleet.Syncs``).

Each merchant has its own client and rate budget (the platform's limit is per merchant, read
from its own capabilities), its own engine on a fenced view of the warehouse (every commit
checks the epoch), its metrics and log fields; every merchant shares the process's one
warehouse engine and pool and the one ``JobHost`` with its bounded thread pools.  A budget
starts cold: the holder before us may have spent the last window, and the platform counts
both against the same merchant.  A merchant whose secret is wrong or whose platform
answers fail retries on its own, slowly, and never holds the others back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from recordsync.core.errors import (
    FatalPlatformError,
    LeaseSupersededError,
    RecordSyncError,
    ShutdownRequestedError,
)
from recordsync.core.models import DEFAULT_LIMITS, Limits
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.metrics import Metrics
from recordsync.platform.budget import RateBudget
from recordsync.platform.client import PlatformClient
from recordsync.service.observers import ClientMetricsObserver, SyncMetricsObserver
from recordsync.service.secrets import SecretKeeper
from recordsync.sync.engine import SyncEngine, SyncOptions
from recordsync.sync.events import MultiObserver, SyncObserver
from recordsync.sync.jobs import JobHost
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import BackfillRequest, Warehouse

log = structlog.get_logger("recordsync")

BACKFILL_POLL = 2.0  # seconds between looks for backfills handed over to this holder


@dataclass(eq=False)
class _Run:
    merchant_id: str
    epoch: int
    stopper: Stopper
    started_at: float
    thread: threading.Thread | None = None
    engine: SyncEngine | None = field(default=None)
    # What a requested backfill reuses: the same client (so the same budget) and options.
    client: PlatformClient | None = None
    options: SyncOptions | None = None
    backfills: set[int] = field(default_factory=set)  # request ids running here


class MerchantSyncs:
    def __init__(
        self,
        settings: Settings,
        *,
        warehouse: Warehouse,
        secrets: SecretKeeper,
        metrics: Metrics,
        host: JobHost,
        stopper: Stopper,
        replica_id: str = "",
        extra_observer: Callable[[str], SyncObserver | None] = lambda _merchant: None,
        clock: Callable[[], float] = time.time,
        backfill_poll: float = BACKFILL_POLL,
    ) -> None:
        self._settings = settings
        self._warehouse = warehouse
        self._secrets = secrets
        self._metrics = metrics
        self._host = host
        self._stopper = stopper
        self._extra_observer = extra_observer
        self._clock = clock
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._replica_id = replica_id
        self._backfill_poll = backfill_poll
        self._watcher: threading.Thread | None = None

    # -- fleet.Syncs ----------------------------------------------------------------------------

    def start(self, merchant_id: str, epoch: int) -> None:
        run = _Run(merchant_id, epoch, Stopper(parent=self._stopper), self._clock())
        run.thread = threading.Thread(
            target=self._sync, args=(run,), name=f"sync-{merchant_id}", daemon=True
        )
        with self._lock:
            self._runs[merchant_id] = run
        self._metrics.set_lease_held(merchant_id, held=True)
        run.thread.start()
        self._watch_once()

    def stop(self, merchant_id: str) -> None:
        with self._lock:
            run = self._runs.pop(merchant_id, None)
        if run is not None:
            run.stopper.stop()
            if run.thread is not None:
                run.thread.join()
        self._metrics.forget_merchant(merchant_id)

    def running(self) -> frozenset[str]:
        with self._lock:
            return frozenset(
                merchant_id
                for merchant_id, run in self._runs.items()
                if run.thread is not None and run.thread.is_alive()
            )

    # -- for readiness and the tail's wake-up ------------------------------------------------

    def held_since(self) -> dict[str, float]:
        """When each merchant this process syncs was taken (readiness grace per merchant)."""
        with self._lock:
            return {merchant_id: run.started_at for merchant_id, run in self._runs.items()}

    def wake(self, merchant_id: str) -> bool:
        """Read the merchant's changes now; False when this process does not sync it."""
        with self._lock:
            run = self._runs.get(merchant_id)
        if run is None or run.engine is None:
            return False
        run.engine.wake_tail()
        return True

    # -- one merchant's sync ----------------------------------------------------------------------

    def _sync(self, run: _Run) -> None:
        settings = self._settings
        merchant = settings.merchant(run.merchant_id)
        assert merchant.base_url is not None
        metrics = self._metrics.merchant(run.merchant_id)
        budget = RateBudget(
            DEFAULT_LIMITS.record_requests,
            DEFAULT_LIMITS.record_seconds,
            margin=settings.rate_margin,
            sleep=run.stopper.sleep,
            cold_start=True,
        )
        self._metrics.watch_budget(run.merchant_id, budget)
        client = PlatformClient(
            base_url=merchant.base_url,
            merchant_id=run.merchant_id,
            secret=self._secrets.provider(run.merchant_id),
            budget=budget,
            timeout=settings.http_timeout,
            verify=settings.verify,
            sleep=run.stopper.sleep,
            observer=ClientMetricsObserver(metrics),
        )
        bound = log.bind(merchant_id=run.merchant_id, epoch=run.epoch)
        try:
            limits = self._capabilities(client, bound)
            options = SyncOptions(
                merchant_id=run.merchant_id,
                history_from=merchant.history_from,
                page_size=min(settings.page_size, limits.max_page_size),
                poll_interval=settings.poll_interval,
                snapshot_concurrency=fair_concurrency(
                    settings.snapshot_concurrency,
                    self._host.worker_threads,
                    len(settings.merchants),
                ),
                drift_interval=settings.drift_check_interval or None,
                idle_commit_interval=settings.idle_commit_interval,
            )
            observers: list[SyncObserver] = [SyncMetricsObserver(metrics)]
            extra = self._extra_observer(run.merchant_id)
            if extra is not None:
                observers.append(extra)
            run.engine = SyncEngine(
                client=client,
                warehouse=self._warehouse.fenced(run.merchant_id, run.epoch),
                options=options,
                stopper=run.stopper,
                observer=MultiObserver(*observers),
                host=self._host,
            )
            run.client, run.options = client, options
            bound.info("merchant_sync_started")
            run.engine.run()
        except LeaseSupersededError as exc:
            bound.error(
                "lease_superseded",
                error=str(exc),
                action="stopped syncing this merchant; its new holder goes on",
            )
        except Exception:  # noqa: BLE001 - a bug in one merchant must not end the others
            bound.exception("merchant_sync_failed", action="released; the fleet retries it")
        finally:
            run.stopper.stop()  # ends the backfills requested for this merchant
            client.close()
            bound.info("merchant_sync_stopped")

    # -- backfills handed over by `recordsync backfill` -----------------------------------------

    def _watch_once(self) -> None:
        """Start the one backfill watcher of this process, unless it runs already."""
        with self._lock:
            if self._watcher is not None:
                return
            self._watcher = threading.Thread(
                target=self._watch_backfills, name="backfill-requests", daemon=True
            )
        self._watcher.start()

    def _watch_backfills(self) -> None:
        """Run the backfills requested for the merchants held here, each inside its budget
        beside its tail.  One thread and one query for every merchant held, however many."""
        runner = StepRunner(stopper=self._stopper, observer=SyncObserver(), fatal_is_final=False)
        try:
            while not self._stopper.stopped:
                with self._lock:
                    ready = {
                        merchant_id: run
                        for merchant_id, run in self._runs.items()
                        if run.options is not None and not run.stopper.stopped
                    }
                held = tuple(ready)
                pending = runner.run(
                    lambda: self._warehouse.pending_backfills(*held),  # noqa: B023 - run at once
                    what="read backfill requests",
                )
                for request in pending:
                    run = ready[request.merchant_id]
                    if request.id not in run.backfills:
                        run.backfills.add(request.id)
                        threading.Thread(
                            target=self._backfill,
                            args=(run, request),
                            name=f"backfill-{request.id}",
                            daemon=True,
                        ).start()
                self._stopper.sleep(self._backfill_poll)
        except ShutdownRequestedError:
            return

    def _backfill(self, run: _Run, request: BackfillRequest) -> None:
        assert run.client is not None
        assert run.options is not None
        bound = log.bind(merchant_id=run.merchant_id, request_id=request.id, job=request.job)
        runner = StepRunner(stopper=run.stopper, observer=SyncObserver(), fatal_is_final=False)
        engine = SyncEngine(
            client=run.client,
            warehouse=self._warehouse.fenced(run.merchant_id, run.epoch),
            options=run.options,
            stopper=Stopper(parent=run.stopper),
            observer=SyncMetricsObserver(self._metrics.merchant(run.merchant_id)),
            host=self._host,
        )
        try:
            runner.run(
                lambda: self._warehouse.start_backfill_request(request.id, self._replica_id),
                what="start backfill request",
            )
            bound.info("requested_backfill_started")
            result = engine.backfill(request.created_from, request.created_to)
            if run.stopper.stopped:
                return  # handed over or stopping: the next holder resumes the request
            runner.run(
                lambda: self._warehouse.finish_backfill_request(request.id),
                what="finish backfill request",
            )
            bound.info("requested_backfill_finished", records=result.records)
        except (ShutdownRequestedError, LeaseSupersededError):
            return  # left running: the next holder resumes it
        except RecordSyncError as exc:
            bound.error("requested_backfill_failed", error=str(exc))
            with contextlib.suppress(RecordSyncError):
                self._warehouse.finish_backfill_request(request.id, failed=str(exc))

    def _capabilities(self, client: PlatformClient, bound: Any) -> Limits:
        try:
            return client.apply_capabilities()
        except FatalPlatformError as exc:
            # Reported here, and again by the first sync step, which keeps trying slowly:
            # a wrong secret of one merchant never holds the others back.
            bound.error(
                "capabilities_failed", error=str(exc), code=exc.code, request_id=exc.request_id
            )
            return DEFAULT_LIMITS


def fair_concurrency(wanted: int, worker_threads: int, merchants: int) -> int:
    """Snapshot workers per merchant on a shared host: ``wanted``, but no more than each
    merchant's share of the worker threads (at least one).  Otherwise the first merchants to
    start a snapshot take every thread and the others wait for a whole window to end: with
    10 merchants and 16 threads, 8 snapshotted and 2 waited (bench/fleet.py)."""
    return max(1, min(wanted, worker_threads // max(merchants, 1)))

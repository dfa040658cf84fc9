"""The merchants this process syncs: one sync per merchant it holds, started under the
merchant's lease epoch and stopped when the fleet hands it over (``fleet.Syncs``).

Each merchant has its own client and rate budget (the platform's limit is per merchant, read
from its own capabilities) and its own query budget for the game catalogue, a job beside its
tail, all built by ``runtime`` as for the one-shot commands, its own engine on a fenced view of
the warehouse (every commit checks the epoch), its metrics and log fields; every merchant
shares the process's one warehouse engine and pool and the one ``JobHost`` with its bounded
thread pools.  A budget
starts cold: the holder before us may have spent the last window, and the platform counts
both against the same merchant.  A merchant whose secret is wrong or whose platform
answers fail retries on its own, slowly, and never holds the others back.

A merchant's sync that dies of an unexpected error (a bug: the platform's and the warehouse's
errors are retried where they happen) is restarted here, in its own thread, under the same
lease, after an exponential backoff with jitter (``RestartPolicy``: 5 s doubling to 5 min,
back to the start once an attempt ran longer than the cap).  It is logged with the error's
class and where it was raised, never its message (which could quote anything, a secret
included), and counted in ``recordsync_merchant_sync_failures_total``.  The lease is kept
while it waits: handing the merchant to another replica would only move the same bug there,
and releasing it to take it straight back was a restart at every fleet tick.  A stop or a
hand-over ends the wait at once; the process and the other merchants never notice.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import structlog

from recordsync.core.errors import (
    LeaseSupersededError,
    LeaseUnconfirmedError,
    ShutdownRequestedError,
)
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.metrics import Metrics
from recordsync.platform.client import PlatformClient
from recordsync.service.daemon.observers import ClientMetricsObserver, SyncMetricsObserver
from recordsync.service.daemon.requested_work import RequestedWork
from recordsync.service.ports.round_events.wakeups import CrossCheckMetricsObserver
from recordsync.service.runtime import (
    MerchantSync,
    Purpose,
    Share,
    merchant_client,
    merchant_sync,
)
from recordsync.service.secrets import SecretKeeper
from recordsync.sync.demand import SnapshotDemand
from recordsync.sync.events import MultiObserver, SyncObserver
from recordsync.sync.jobs import JobHost
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")

_WHERE_FRAMES: Final = 3  # innermost frames named when a merchant's sync fails


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When a merchant's sync that died of an unexpected error starts again.

    The ``failures``-th consecutive failure waits between half and all of
    ``min(cap, base * 2 ** (failures - 1))``: never less than ``base / 2`` (no hot loop),
    never more than ``cap``, and replicas that fail together spread out.  An attempt that ran
    longer than ``cap`` before failing starts the count again.
    """

    base: float = 5.0
    cap: float = 300.0

    def __post_init__(self) -> None:
        if not 0 < self.base <= self.cap:
            raise ValueError(f"need 0 < base <= cap, got base={self.base} cap={self.cap}")

    def delay(self, failures: int, rng: random.Random) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** min(max(failures - 1, 0), 32))
        return ceiling * rng.uniform(0.5, 1.0)


def failure_site(exc: BaseException) -> str:
    """Where ``exc`` was raised: file:line function, innermost first, each called from the
    next (``a < b``); never its message."""
    frames = traceback.extract_tb(exc.__traceback__)[-_WHERE_FRAMES:]
    return " < ".join(
        f"{Path(frame.filename).name}:{frame.lineno} {frame.name}" for frame in reversed(frames)
    )


@dataclass(eq=False)
class _Run:
    merchant_id: str
    epoch: int
    stopper: Stopper
    started_at: float
    thread: threading.Thread | None = None
    # The attempt syncing now, which a request handed to this holder builds its engine from:
    # the same client (so the same budget), options and demand (``requested_work``).
    sync: MerchantSync | None = None
    # The merchant's one demand here, for every attempt: a backfill handed over during one
    # attempt still stretches the tail of the next.
    demand: SnapshotDemand = field(default_factory=SnapshotDemand)
    requests: set[int] = field(default_factory=set)  # request ids running here


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
        request_poll: float | None = None,
        restart: RestartPolicy | None = None,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        lease: Callable[[str], bool] | None = None,
    ) -> None:
        """``lease(merchant_id)``: whether this process's lease of the merchant is confirmed
        now (``FleetSession.confirmed``); nothing is sent for a merchant once it is not."""
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
        self._restart = restart or RestartPolicy()
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not security
        self._monotonic = monotonic
        self._lease = lease
        self._requested = RequestedWork(
            warehouse=warehouse,
            replica_id=replica_id,
            metrics=metrics,
            stopper=stopper,
            held=self._built,
            backoff=lambda failures: self._restart.delay(failures, self._rng),
            # A tick of the fleet's (``settings.fleet_tick``): a request handed to this holder
            # is taken up as soon as a hand-over to it would be.
            poll=settings.fleet_tick if request_poll is None else request_poll,
            failure_site=failure_site,
        )

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
        self._requested.watch()

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

    def _built(self) -> dict[str, _Run]:
        """The merchants whose sync runs here (its client built or not: ``requested_work``
        waits for ``sync``)."""
        with self._lock:
            return dict(self._runs)

    # -- for readiness and the tail's wake-up ------------------------------------------------

    def held_since(self) -> dict[str, float]:
        """When each merchant this process syncs was taken (readiness grace per merchant)."""
        with self._lock:
            return {merchant_id: run.started_at for merchant_id, run in self._runs.items()}

    def wake(self, merchant_id: str) -> bool:
        """Read the merchant's changes now; False when this process does not sync it."""
        with self._lock:
            run = self._runs.get(merchant_id)
        sync = None if run is None else run.sync
        if sync is None:
            return False
        sync.engine.wake_tail()
        return True

    # -- one merchant's sync ----------------------------------------------------------------------

    def _sync(self, run: _Run) -> None:
        settings = self._settings
        merchant = settings.merchant(run.merchant_id)
        assert merchant.base_url is not None
        metrics = self._metrics.merchant(run.merchant_id)
        # One budget and client for every attempt: a restart never spends the limit afresh.
        client = merchant_client(
            settings,
            merchant,
            secrets=self._secrets,
            stopper=run.stopper,
            observer=ClientMetricsObserver(metrics),
        )
        self._metrics.watch_budget(run.merchant_id, client.budget)
        lease = self._lease
        if lease is not None:
            client.hold_under(lambda: lease(run.merchant_id))
        bound = log.bind(merchant_id=run.merchant_id, epoch=run.epoch)
        failures = 0
        try:
            while not run.stopper.stopped:
                started = self._monotonic()
                try:
                    self._attempt(run, client, bound)
                except (LeaseSupersededError, LeaseUnconfirmedError, ShutdownRequestedError):
                    raise
                except Exception as exc:  # noqa: BLE001 - a bug in one merchant must not end the others
                    ran = self._monotonic() - started
                    failures = 1 if ran > self._restart.cap else failures + 1
                    delay = self._failed(
                        run,
                        bound,
                        exc,
                        "merchant_sync_failed",
                        failures,
                        ran_seconds=round(ran, 1),
                        action="restarting this merchant's sync after the wait; the others go on",
                    )
                else:
                    return  # stopped: a hand-over or the process's stop
                run.sync = None  # the failed engine (and its frames) go before the wait
                run.stopper.sleep(delay)
        except LeaseSupersededError as exc:
            bound.error(
                "lease_superseded",
                error=str(exc),
                action="stopped syncing this merchant; its new holder goes on",
            )
        except LeaseUnconfirmedError as exc:
            self._metrics.set_lease_held(run.merchant_id, held=False)
            bound.error(
                "lease_unconfirmed",
                error=str(exc),
                action="stopped syncing this merchant at once: the database could not confirm "
                "the lease; it is taken again once the fleet holds it",
            )
        except ShutdownRequestedError:
            pass  # stopped (a hand-over or the process's stop) while starting or waiting
        finally:
            run.stopper.stop()  # ends the requests running for this merchant
            client.close()
            bound.info("merchant_sync_stopped")

    def _failed(
        self, run: _Run, bound: Any, exc: Exception, event: str, failures: int, **fields: object
    ) -> float:
        """Count and log a bug's ``failures``-th time in a row (its class and frames, never its
        message); return how long to wait before trying again."""
        delay = self._restart.delay(failures, self._rng)
        self._metrics.merchant(run.merchant_id).sync_failed(type(exc).__name__)
        bound.error(
            event,
            kind=type(exc).__name__,
            where=failure_site(exc),
            failures=failures,
            retry_in_seconds=round(delay, 1),
            **fields,
        )
        return delay

    def _attempt(self, run: _Run, client: PlatformClient, bound: Any) -> None:
        """Build this merchant's engine and sync until stopped (one attempt)."""
        settings = self._settings
        merchant = settings.merchant(run.merchant_id)
        observers: list[SyncObserver] = [
            SyncMetricsObserver(self._metrics.merchant(run.merchant_id)),
            CrossCheckMetricsObserver(self._metrics.round_events, run.merchant_id),
        ]
        extra = self._extra_observer(run.merchant_id)
        if extra is not None:
            observers.append(extra)
        sync = merchant_sync(
            settings,
            merchant,
            client,
            self._warehouse.fenced(run.merchant_id, run.epoch),
            Purpose.DAEMON,
            stopper=run.stopper,
            observer=MultiObserver(*observers),
            host=self._host,
            share=Share(self._host.worker_threads, len(settings.merchants)),
            receives_events=bool(settings.events_port),
            demand=run.demand,
            logger=bound,
        )
        run.sync = sync
        bound.info("merchant_sync_started")
        sync.engine.run()

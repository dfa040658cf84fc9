"""``recordsync run``: the daemon.  Metrics and health on the HTTP port, then one lease term
after another until a signal stops it.  The secret keeper's watcher runs alongside, so a
rotated secret signs the next request without a restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import structlog
from prometheus_client import CollectorRegistry

from recordsync.core.errors import ConfigurationError, ShutdownRequestedError
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.logs import process_context
from recordsync.metrics import Metrics
from recordsync.service.app import App, open_app
from recordsync.service.health import HealthServer, ReadinessCheck
from recordsync.service.lease import acquire_lease
from recordsync.service.log_context import ProcessLogContext
from recordsync.service.observers import ClientMetricsObserver, SyncMetricsObserver
from recordsync.service.secrets import SecretKeeper
from recordsync.service.signals import stop_on_signals
from recordsync.sync.events import MultiObserver
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")


def run_daemon(settings: Settings, *, registry: CollectorRegistry | None = None) -> int:
    """The daemon: metrics and health on the HTTP port, one lease term after another."""
    if len(settings.merchants) > 1:
        raise ConfigurationError("several merchants: the multi-merchant daemon is not built yet")
    merchant = settings.merchant()
    stopper = Stopper()
    metrics = Metrics(registry or CollectorRegistry())
    merchant_metrics = metrics.merchant(merchant.merchant_id)
    metrics.set_lease_held(merchant.merchant_id, held=False)  # a standby shows 0, not nothing
    process_context.update(merchant_id=merchant.merchant_id, phase="starting")
    secrets = SecretKeeper.from_settings(settings)
    try:
        with (
            stop_on_signals(stopper),
            secrets,  # the watcher: refreshes every secret file until the daemon stops
            open_app(
                settings,
                secrets=secrets,
                stopper=stopper,
                observer=MultiObserver(
                    SyncMetricsObserver(merchant_metrics),
                    ProcessLogContext(merchant.merchant_id),
                ),
                client_observer=ClientMetricsObserver(merchant_metrics),
            ) as app,
            _health_server(settings, metrics, app.warehouse),
        ):
            log.info("daemon_started")
            while not stopper.stopped:
                _one_lease_term(app, stopper, metrics)
    except ShutdownRequestedError:
        pass  # stopped while starting up or waiting as a standby: nothing was in hand
    log.info("daemon_stopped")
    return 0


def _one_lease_term(app: App, stopper: Stopper, metrics: Metrics) -> None:
    """Hold the merchant's lease and sync; a lost lease ends the term, the next one waits."""
    merchant_id = app.merchant.merchant_id
    term = Stopper(parent=stopper)
    process_context.update(phase="standby")
    lease = acquire_lease(app.warehouse, merchant_id, sleep=stopper.sleep, on_lost=term.stop)
    with lease:  # acquire_lease logs lease_acquired itself
        metrics.set_lease_held(merchant_id, held=True)
        metrics.watch_budget(merchant_id, app.client.budget)
        try:
            app.engine_for(term).run()
        finally:
            # The merchant's gauges are the next holder's to report (lease 0 here).
            metrics.forget_merchant(merchant_id)
    if not stopper.stopped:
        log.error("lease_lost", action="stopped taking pages; waiting to hold the lease again")


@contextmanager
def _health_server(settings: Settings, metrics: Metrics, warehouse: Warehouse) -> Iterator[None]:
    if not settings.http_port:
        yield
        return
    merchant_id = settings.merchant().merchant_id
    readiness = ReadinessCheck(
        ping=warehouse.ping,
        last_commit_at=lambda: metrics.last_commit_at(merchant_id),
        poll_interval=settings.poll_interval,
        multiple=settings.ready_multiple,
    )
    with HealthServer(settings.http_port, registry=metrics.registry, readiness=readiness):
        log.info("http_listening", port=settings.http_port, paths="/metrics /healthz /readyz")
        yield

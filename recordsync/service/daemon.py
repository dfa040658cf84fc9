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
from recordsync.service.observers import ClientMetricsObserver, SyncMetricsObserver
from recordsync.service.secrets import SecretKeeper
from recordsync.service.signals import stop_on_signals
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")


def run_daemon(settings: Settings, *, registry: CollectorRegistry | None = None) -> int:
    """The daemon: metrics and health on the HTTP port, one lease term after another."""
    if len(settings.merchants) > 1:
        raise ConfigurationError("several merchants: the multi-merchant daemon is not built yet")
    merchant = settings.merchant()
    stopper = Stopper()
    metrics = Metrics(registry or CollectorRegistry())
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
                observer=SyncMetricsObserver(metrics),
                client_observer=ClientMetricsObserver(metrics),
            ) as app,
            _health_server(settings, metrics, app.warehouse),
        ):
            metrics.watch_budget(app.client.budget)
            log.info("daemon_started")
            while not stopper.stopped:
                _one_lease_term(app, stopper)
    except ShutdownRequestedError:
        pass  # stopped while starting up or waiting as a standby: nothing was in hand
    log.info("daemon_stopped")
    return 0


def _one_lease_term(app: App, stopper: Stopper) -> None:
    """Hold the merchant's lease and sync; a lost lease ends the term, the next one waits."""
    term = Stopper(parent=stopper)
    process_context.update(phase="standby")
    lease = acquire_lease(
        app.warehouse, app.merchant.merchant_id, sleep=stopper.sleep, on_lost=term.stop
    )
    with lease:  # acquire_lease logs lease_acquired itself
        app.engine_for(term).run()
    if not stopper.stopped:
        log.error("lease_lost", action="stopped taking pages; waiting to hold the lease again")


@contextmanager
def _health_server(settings: Settings, metrics: Metrics, warehouse: Warehouse) -> Iterator[None]:
    if not settings.http_port:
        yield
        return
    readiness = ReadinessCheck(
        ping=warehouse.ping,
        last_commit_at=lambda: metrics.last_commit_at,
        poll_interval=settings.poll_interval,
        multiple=settings.ready_multiple,
    )
    with HealthServer(settings.http_port, registry=metrics.registry, readiness=readiness):
        log.info("http_listening", port=settings.http_port, paths="/metrics /healthz /readyz")
        yield

"""``recordsync run``: the daemon.  Metrics and health on the HTTP port; the replica joins the
fleet of processes that share the configured merchants through the warehouse, syncs the
merchants it holds, and hands them over at once when it stops.

One code path for one merchant and for many, one replica and many: a lone replica simply
holds every merchant (and, on SQLite, a second process waits as a standby).  The secret
keeper's watcher runs alongside, so a rotated secret signs the next request without a
restart.
"""

from __future__ import annotations

import os
import secrets as random_tokens
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import structlog
from prometheus_client import CollectorRegistry

from recordsync.core.errors import ConfigurationError, ShutdownRequestedError
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.fleet.member import Member
from recordsync.logs import process_context
from recordsync.metrics import Metrics
from recordsync.service.daemon.log_context import ProcessLogContext
from recordsync.service.daemon.merchant_syncs import MerchantSyncs
from recordsync.service.ports.health import PROBE_LIMITS, FleetReadinessCheck, HealthServer
from recordsync.service.ports.round_events.connections import DEFAULT_LIMITS as EVENTS_LIMITS
from recordsync.service.ports.round_events.running import receiving_round_events
from recordsync.service.secrets import SecretKeeper
from recordsync.service.signals import stop_on_signals
from recordsync.sync.events import SyncObserver
from recordsync.sync.jobs import JobHost
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import PoolDemand, Warehouse

log = structlog.get_logger("recordsync")

# A silent replica keeps its merchants' locks for the lease (``settings.lease_seconds``)
# before the database frees them (a paused or partitioned process); a dead one loses them at
# once.  Failover: the lease, or the staleness of its heartbeat (``STALE_TICKS`` ticks), plus
# a tick (``settings.fleet_tick``).


def replica_id() -> str:
    """Unique per process, readable in status and logs: host, pid and a random suffix."""
    host = socket.gethostname().split(".")[0][:40] or "host"
    return f"{host}-{os.getpid()}-{random_tokens.token_hex(2)}"


def run_daemon(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    stopper: Stopper | None = None,
) -> int:
    """The daemon: join the fleet, sync what it holds, hand everything over on a stop.

    ``stopper``: a stop from outside besides the signals (tests running it in a thread)."""
    stopper = stopper or Stopper()
    metrics = Metrics(registry or CollectorRegistry())
    merchant_ids = [merchant.merchant_id for merchant in settings.merchants]
    for merchant_id in merchant_ids:
        metrics.set_lease_held(merchant_id, held=False)  # a standby shows 0, not nothing
        metrics.set_paused(merchant_id, paused=False)
    me = replica_id()
    single = merchant_ids[0] if len(merchant_ids) == 1 else None
    process_context.update(replica_id=me, phase="starting")
    if single is not None:
        process_context.update(merchant_id=single)
    keeper = SecretKeeper.from_settings(settings)
    host = JobHost(worker_threads=max(settings.snapshot_concurrency * 4, 8))
    warehouse = Warehouse.connect(
        settings.database_url,
        keep_revisions=settings.keep_revisions,
        pool=pool_demand(settings, host),
        on_checkout=metrics.pool_checkout,
        lease_seconds=settings.lease_seconds,
    )
    try:
        with stop_on_signals(stopper), keeper:
            # A warehouse that is down at start-up is waited for, like one that goes down later.
            StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=False).run(
                warehouse.migrate, what="migrate"
            )
            _refuse_first_start_without_history(
                StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=False).run(
                    lambda: _never_synced_without_history(settings, warehouse),
                    what="check history_from",
                )
            )

            def lost(merchants: frozenset[str]) -> None:
                for merchant_id in merchants:  # at once; the fleet's next tick stops them
                    metrics.set_lease_held(merchant_id, held=False)

            session = warehouse.fleet_session(me, on_lost=lost)
            # Nothing is sent for a merchant, and it shows as not held, from the moment its
            # lease is not confirmed (self-fencing reads).
            metrics.watch_leases(session.confirmed)
            syncs = MerchantSyncs(
                settings,
                warehouse=warehouse,
                secrets=keeper,
                metrics=metrics,
                host=host,
                stopper=stopper,
                replica_id=me,
                extra_observer=lambda merchant_id: (
                    ProcessLogContext(merchant_id) if merchant_id == single else None
                ),
                lease=session.confirmed,
            )
            try:
                member = Member(
                    session,
                    syncs,
                    replica_id=me,
                    merchants=merchant_ids,
                    stopper=stopper,
                    tick=settings.fleet_tick,
                    stale_after=settings.heartbeat_stale_after,
                    on_change=lambda _held, live: metrics.set_replicas_live(live),
                    paused=lambda: warehouse.controls.paused(merchant_ids),
                    on_paused=lambda paused: metrics.set_paused_among(merchant_ids, paused),
                )
                with (
                    _health_server(settings, metrics, warehouse, syncs),
                    receiving_round_events(
                        settings,
                        warehouse=warehouse,
                        secrets=keeper,
                        syncs=syncs,
                        metrics=metrics.round_events,
                        replica_id=me,
                        stopper=stopper,
                    ),
                ):
                    log.info("daemon_started", merchants=len(merchant_ids), lease=session.resource)
                    member.run()
            finally:
                session.close()
    except ShutdownRequestedError:
        pass  # stopped while starting up: nothing was in hand
    finally:
        host.shutdown()
        warehouse.close()
    log.info("daemon_stopped")
    return 0


def pool_demand(settings: Settings, host: JobHost) -> PoolDemand:
    """The threads of this daemon that may each hold a warehouse connection at once, which
    size its pool (``warehouse.pool``; docs/operations.md, "The warehouse's connections")."""
    return PoolDemand(
        merchants=len(settings.merchants),
        snapshot_workers=host.worker_threads,
        periodic_threads=host.periodic_threads,
        event_workers=EVENTS_LIMITS.workers if settings.events_port else 0,
        request_threads=PROBE_LIMITS.workers if settings.http_port else 0,
        configured=settings.db_pool_size,
    )


def _never_synced_without_history(settings: Settings, warehouse: Warehouse) -> list[str]:
    return [
        merchant.merchant_id
        for merchant in settings.merchants
        if merchant.history_from is None
        and warehouse.state.load_state(merchant.merchant_id) is None
    ]


def _refuse_first_start_without_history(missing: list[str]) -> None:
    """A merchant never synced needs ``history_from`` (where its snapshot starts): no retry
    can supply it, so the daemon exits 2 at start naming it, instead of retrying the anchor
    for ever.  A merchant with a sync state does not need it any more."""
    if missing:
        raise ConfigurationError(
            "RECORDSYNC_HISTORY_FROM (or history_from of the merchant in the config file): "
            f"required on the first start of {', '.join(map(repr, missing))}, whose history "
            "the warehouse does not hold yet (an RFC3339 time: where the copy starts)"
        )


def _held(metrics: Metrics, syncs: MerchantSyncs) -> Mapping[str, tuple[float, float | None]]:
    return {
        merchant_id: (since, metrics.last_commit_at(merchant_id))
        for merchant_id, since in syncs.held_since().items()
    }


@contextmanager
def _health_server(
    settings: Settings, metrics: Metrics, warehouse: Warehouse, syncs: MerchantSyncs
) -> Iterator[None]:
    if not settings.http_port:
        yield
        return
    readiness = FleetReadinessCheck(
        ping=warehouse.ping,
        held=lambda: _held(metrics, syncs),
        poll_interval=settings.poll_interval,
        multiple=settings.readiness_multiple,
        clock=time.time,
    )
    with HealthServer(settings.http_port, registry=metrics.registry, readiness=readiness):
        log.info("http_listening", port=settings.http_port, paths="/metrics /healthz /readyz")
        yield

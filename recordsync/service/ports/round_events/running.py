"""The daemon's part of round-end notifications: the receiver on ``RECORDSYNC_EVENTS_PORT``
and the wake-ups of the tails this replica holds for notifications others answered."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import structlog

from recordsync.core.errors import ConfigurationError
from recordsync.core.secret import Secret
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.metrics.round_events import RoundEventMetrics
from recordsync.service.ports.round_events.receiver import (
    EventsServer,
    RoundEventReceiver,
    asgi_app,
)
from recordsync.service.ports.round_events.signature import PATH
from recordsync.service.ports.round_events.wakeups import HolderWakeups, Wakeable, wake_local
from recordsync.service.secrets import SecretKeeper
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync.events")


@contextmanager
def receiving_round_events(
    settings: Settings,
    *,
    warehouse: Warehouse,
    secrets: SecretKeeper,
    syncs: Wakeable,
    metrics: RoundEventMetrics,
    replica_id: str,
    stopper: Stopper,
) -> Iterator[EventsServer | None]:
    """Serve ``POST /v1/round-events`` while the block runs (None when the port is 0)."""
    if not settings.events_port:
        yield None
        return
    merchants = frozenset(merchant.merchant_id for merchant in settings.merchants)

    def accepted(merchant_id: str) -> Sequence[Secret] | None:
        return secrets.accepted(merchant_id) if merchant_id in merchants else None

    receiver = RoundEventReceiver(
        secrets=accepted,
        store=lambda event: warehouse.events.record_round_event(event, received_by=replica_id),
        wake=wake_local(syncs, metrics),
        metrics=metrics,
    )
    server = EventsServer(asgi_app(receiver), host=settings.events_host, port=settings.events_port)
    try:
        server.start()
    except OSError as exc:
        raise ConfigurationError(
            f"RECORDSYNC_EVENTS_PORT: cannot listen on {settings.events_host}:"
            f"{settings.events_port} ({exc.strerror})"
        ) from None
    wakeups = HolderWakeups(
        lambda: warehouse.events.round_event_feed(replica_id),
        syncs,
        stopper=stopper,
        metrics=metrics,
    )
    try:
        with wakeups:
            log.info(
                "round_events_listening",
                host=settings.events_host,
                port=server.port,
                path=PATH,
            )
            yield server
    finally:
        server.stop()

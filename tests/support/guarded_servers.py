"""The two guarded servers of the daemon (notifications, probes) with production limits, for
the hostile-client tests; run as a script (``python -m support.guarded_servers``), both serve
in a process of their own, which a test can pause with SIGSTOP.

The script prints ``<events port> <probe port>`` on one line, then serves until its stdin
closes; its log goes to stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Metric
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from recordsync.core.round_events import RoundEvent, RoundEventReceipt
from recordsync.core.secret import Secret
from recordsync.logs import configure_logging
from recordsync.metrics.round_events import RoundEventMetrics
from recordsync.service.ports.bounded_http import HttpLimits
from recordsync.service.ports.health import PROBE_LIMITS, HealthServer, Readiness
from recordsync.service.ports.round_events.connections import DEFAULT_LIMITS, EventsLimits
from recordsync.service.ports.round_events.receiver import (
    EventsServer,
    RoundEventReceiver,
    asgi_app,
)
from support.round_event_requests import MERCHANT, SECRET

ACCEPTED_AT = datetime(2026, 11, 28, 8, 0, tzinfo=UTC)


def new_receiver(metrics: RoundEventMetrics | None = None) -> RoundEventReceiver:
    """Accepts MERCHANT's notifications signed with SECRET, storing their ids in memory;
    counts what it answers in ``metrics``, if given."""
    stored: set[str] = set()

    def store(event: RoundEvent) -> RoundEventReceipt:
        duplicate = event.event_id in stored
        stored.add(event.event_id)
        return RoundEventReceipt(ACCEPTED_AT, duplicate=duplicate)

    return RoundEventReceiver(
        secrets=lambda merchant_id: [Secret(SECRET)] if merchant_id == MERCHANT else None,
        store=store,
        wake=lambda _event: None,
        metrics=metrics,
    )


def events_server(
    limits: EventsLimits = DEFAULT_LIMITS, *, metrics: RoundEventMetrics | None = None
) -> EventsServer:
    app = asgi_app(new_receiver(metrics), limits=limits)
    return EventsServer(app, host="127.0.0.1", port=0, limits=limits)


def health_server(
    limits: HttpLimits = PROBE_LIMITS, *, registry: CollectorRegistry | None = None
) -> HealthServer:
    ready = Readiness(ready=True, reason="fine")
    return HealthServer(
        0,
        host="127.0.0.1",
        registry=CollectorRegistry() if registry is None else registry,
        readiness=lambda: ready,
        limits=limits,
    )


class _ManySeries(Collector):
    """One gauge with as many series as make ``size`` bytes of exposition: the registry of a
    deployment with many merchants, without them."""

    def __init__(self, size: int) -> None:
        self._series = size // 100

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("test_many_series", "Filler.", labels=["merchant_id", "pad"])
        for n in range(self._series):
            gauge.add_metric([f"m-{n:08d}", "p" * 50], float(n))
        yield gauge


def large_registry(size: int) -> CollectorRegistry:
    """A registry whose ``/metrics`` answer is about ``size`` bytes."""
    registry = CollectorRegistry()
    registry.register(_ManySeries(size))
    return registry


def main() -> None:
    configure_logging(stream=sys.stderr, log_format="json")  # stdout: the ports only
    with events_server() as events, health_server() as health:
        print(events.port, health.port, flush=True)  # noqa: T201 - read by the test
        sys.stdin.read()


if __name__ == "__main__":
    main()

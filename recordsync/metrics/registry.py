"""The daemon's metrics in one registry (``Metrics``): it hands out each merchant's view and
keeps what describes the process and the fleet (the build, the pool, leases, pauses,
replicas).

Every metric lives in the registry given to ``Metrics`` (a fresh one by default, never the
process-global one implicitly), as prometheus client_python recommends for testability.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Gauge, Histogram

from recordsync import __version__
from recordsync.metrics.book import Book, BudgetView
from recordsync.metrics.merchant import Instruments, MerchantMetrics
from recordsync.metrics.names import MetricName, merchant_label
from recordsync.metrics.round_events import RoundEventMetrics
from recordsync.metrics.scrape import ScrapeTimeCollector

# A checkout from the pool: well under a millisecond when a connection is idle, a connect
# (milliseconds) when the pool grows, up to the pool's 30 s timeout when it is exhausted.
CHECKOUT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """All recordsync metrics in one registry: per-merchant views, leases and replicas.

    ``clock`` returns Unix seconds (``time.time``): it stamps the last commit and measures tail
    freshness against ``projection_as_of``, which is platform wall time.  Thread-safe: the
    observers are called from the tail and snapshot worker threads of every merchant.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        clock: Callable[[], float] = time.time,
        version: str = __version__,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._book = Book(clock)
        self._instruments = Instruments.register(self.registry)
        build_info = Gauge(
            MetricName.BUILD_INFO,
            "Always 1; the version of recordsync running, as a label.",
            ["version"],
            registry=self.registry,
        )
        build_info.labels(version=version).set(1)
        self._pool_checkout = Histogram(
            MetricName.POOL_CHECKOUT,
            "Time a thread waited for a connection of the warehouse's pool (a connect "
            "included): a long one means the pool is too small for the process's threads.",
            buckets=CHECKOUT_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(ScrapeTimeCollector(self._book))
        self.round_events = RoundEventMetrics(self.registry)

    def pool_checkout(self, seconds: float) -> None:
        """One checkout from the warehouse's pool took ``seconds`` (``warehouse.pool``)."""
        self._pool_checkout.observe(seconds)

    def merchant(self, merchant_id: str) -> MerchantMetrics:
        """The view that feeds ``merchant_id``'s series (cheap: build one per observer)."""
        return MerchantMetrics(merchant_label(merchant_id), self._instruments, self._book)

    def watch_budget(self, merchant_id: str, budget: BudgetView) -> None:
        """Expose ``budget`` (the merchant's own) at every scrape: size, wait total, queue."""
        with self._book.editing(merchant_label(merchant_id)) as state:
            state.budget = budget

    def last_commit_at(self, merchant_id: str) -> float | None:
        """Unix time of the merchant's last page committed here (for readiness), or None."""
        return self._book.last_commit_at(merchant_id)

    def set_lease_held(self, merchant_id: str, *, held: bool) -> None:
        """Whether this process holds ``merchant_id``'s lease now.

        Set every configured merchant, held or not, so that a merchant nobody holds shows as
        0 on every replica (``max by (merchant_id)`` is 0: an alert) rather than as nothing.
        ``recordsync_merchants_held`` counts the merchants held.
        """
        self._book.set_lease_held(merchant_label(merchant_id), held=held)

    def set_paused(self, merchant_id: str, *, paused: bool) -> None:
        """Whether operators paused ``merchant_id`` (every configured merchant, every tick)."""
        self._book.set_paused(merchant_label(merchant_id), paused=paused)

    def set_paused_among(self, merchant_ids: Iterable[str], paused: Collection[str]) -> None:
        """``set_paused`` for each of ``merchant_ids``: paused when it is in ``paused``."""
        for merchant_id in merchant_ids:
            self.set_paused(merchant_id, paused=merchant_id in paused)

    def watch_leases(self, confirmed: Callable[[str], bool]) -> None:
        """``recordsync_lease_held`` is 1 only while ``confirmed(merchant)`` says the lease is
        still confirmed (``FleetSession.confirmed``): a replica cut off from the database
        shows 0 at once, before another replica takes the merchant."""
        self._book.lease_confirmed = confirmed

    def set_replicas_live(self, count: int) -> None:
        """How many replicas (this one included) the fleet saw alive at its last heartbeat."""
        if count < 0:
            raise ValueError(f"a replica count cannot be negative: {count}")
        self._book.set_replicas_live(count)

    def forget_merchant(self, merchant_id: str) -> None:
        """The merchant was handed to another replica: its gauges go, its lease reads 0.

        Every gauge of the merchant disappears from the next scrape (its budget, snapshot,
        tail, last commit and drift figures are the new holder's to report now).  Its counters
        and histograms stay: they count what this process did, and a rate over them falls to
        zero by itself.  Call it once the merchant's engine has stopped: a later report brings
        the gauges back.
        """
        self._book.forget(merchant_id)
        self.round_events.forget(merchant_id)

"""Wake-ups from round-end notifications: the merchant's tail reads now.

The replica that answers a notification wakes the tail itself when it holds the merchant
(``wake_local``).  When another replica holds it, the warehouse tells that one
(``round_events``: a NOTIFY on PostgreSQL, a short poll elsewhere), and its
``HolderWakeups`` thread wakes the tail there.  Waking is only asking: the tail's own job
reads, through the merchant's rate budget, and a burst costs one read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final, Protocol, Self

import structlog

from recordsync.core.errors import ShutdownRequestedError, WarehouseUnavailableError
from recordsync.core.round_events import RoundEvent
from recordsync.core.stopping import Stopper
from recordsync.metrics.round_events import RoundEventMetrics, WakeVia
from recordsync.sync.events import SyncObserver
from recordsync.warehouse.round_events import RoundEventFeed

log = structlog.get_logger("recordsync.events")

WAIT_SECONDS: Final = 1.0  # one wait on the feed; also how long a stop may take to be seen
OUTAGE_PAUSE: Final = 2.0  # seconds between attempts while the warehouse is unreachable


class Wakeable(Protocol):
    def wake(self, merchant_id: str) -> bool:
        """Read the merchant's changes now; False when this process does not sync it."""
        ...


def wake_local(syncs: Wakeable, metrics: RoundEventMetrics | None) -> Callable[[RoundEvent], None]:
    """The receiver's ``wake``: the tail here when this replica holds the merchant; otherwise
    nothing more, the holder hears of it through the warehouse."""

    def wake(event: RoundEvent) -> None:
        if syncs.wake(event.merchant_id) and metrics is not None:
            metrics.woke(event.merchant_id, WakeVia.LOCAL)

    return wake


class HolderWakeups:
    """Wakes the tails this replica holds for notifications other replicas answered."""

    def __init__(
        self,
        feed: Callable[[], RoundEventFeed],
        syncs: Wakeable,
        *,
        stopper: Stopper,
        metrics: RoundEventMetrics | None = None,
    ) -> None:
        self._open_feed = feed
        self._syncs = syncs
        self._stopper = Stopper(parent=stopper)
        self._metrics = metrics
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="round-event-wakeups", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait (at most one feed wait); safe twice."""
        self._stopper.stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=WAIT_SECONDS * 5)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        feed = self._open_feed()
        unavailable = False
        try:
            while not self._stopper.stopped:
                try:
                    merchants = feed.wait(WAIT_SECONDS)
                except WarehouseUnavailableError as exc:
                    if not unavailable:
                        log.warning(
                            "round_event_feed_unavailable",
                            error=str(exc),
                            action="the tails poll as usual until the warehouse is back",
                        )
                    unavailable = True
                    self._stopper.sleep(OUTAGE_PAUSE)
                    continue
                if unavailable:
                    log.info("round_event_feed_available")
                    unavailable = False
                for merchant_id in sorted(merchants):
                    if self._syncs.wake(merchant_id) and self._metrics is not None:
                        self._metrics.woke(merchant_id, WakeVia.WAREHOUSE)
        except ShutdownRequestedError:
            return
        except Exception:  # the wake-ups are a speed-up: never end the daemon
            log.exception("round_event_wakeups_failed", action="tails poll as usual")
        finally:
            feed.close()


class CrossCheckMetricsObserver(SyncObserver):
    """Feeds ``recordsync_rounds_announced_missing`` from the merchant's cross-check."""

    def __init__(self, metrics: RoundEventMetrics, merchant_id: str) -> None:
        self._metrics = metrics
        self._merchant_id = merchant_id

    def rounds_checked(self, missing: int) -> None:
        self._metrics.set_missing(self._merchant_id, missing)

"""The round-end notification receiver's series: events by outcome, the wake-ups they caused,
the reply time, and the cross-check's gauge of announced rounds still missing.

Every series is labelled ``merchant_id``; a request that named no configured merchant counts
under ``none``, so what a stranger sends cannot add series.
"""

from __future__ import annotations

import contextlib
from enum import StrEnum
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from recordsync.metrics.names import (
    MERCHANT_LABEL,
    NONE_LABEL,
    RoundEventMetricName,
    merchant_label,
)


class EventOutcome(StrEnum):
    """``outcome`` label of ``recordsync_round_events_total``."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # an event_id already stored: the first reply again, nothing changed
    REFUSED = "refused"  # an error reply; ``code`` says which


class WakeVia(StrEnum):
    """``via`` label of ``recordsync_round_event_wakeups_total``: who woke the tail."""

    LOCAL = "local"  # this replica received the event and holds the merchant
    WAREHOUSE = "warehouse"  # another replica received it (NOTIFY or the poll told us)


# A reply is a verification, one insert and a wake-up: milliseconds, unless the warehouse lags.
REPLY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class RoundEventMetrics:
    """The receiver's counters and histogram, the wake-ups, and the cross-check's gauge.

    Built by ``Metrics`` in its registry (``Metrics.round_events``).  Thread-safe.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._events = Counter(
            RoundEventMetricName.EVENTS,
            "Round-end notifications received, by outcome and error code (none: accepted).",
            [MERCHANT_LABEL, "outcome", "code"],
            registry=registry,
        )
        self._wakeups = Counter(
            RoundEventMetricName.WAKEUPS,
            "Tail read-now requests caused by round-end notifications, by who received them.",
            [MERCHANT_LABEL, "via"],
            registry=registry,
        )
        self._reply = Histogram(
            RoundEventMetricName.REPLY_DURATION,
            "Time from a notification's last body byte to its reply.",
            [MERCHANT_LABEL],
            buckets=REPLY_BUCKETS,
            registry=registry,
        )
        self._missing = Gauge(
            RoundEventMetricName.ROUNDS_ANNOUNCED_MISSING,
            "Rounds announced by a round-end notification longer ago than the grace that the "
            "warehouse's records still lack (the cross-check).",
            [MERCHANT_LABEL],
            registry=registry,
        )

    def received(
        self, merchant_id: str | None, outcome: EventOutcome, code: str | None, seconds: float
    ) -> None:
        label = merchant_id or NONE_LABEL
        self._events.labels(label, outcome.value, code or NONE_LABEL).inc()
        self._reply.labels(label).observe(seconds)

    def woke(self, merchant_id: str, via: WakeVia) -> None:
        self._wakeups.labels(merchant_label(merchant_id), via.value).inc()

    def set_missing(self, merchant_id: str, rounds: int) -> None:
        self._missing.labels(merchant_label(merchant_id)).set(rounds)

    def forget(self, merchant_id: str) -> None:
        """The merchant went to another replica: its cross-check is that replica's now."""
        with contextlib.suppress(KeyError):
            self._missing.remove(merchant_id)

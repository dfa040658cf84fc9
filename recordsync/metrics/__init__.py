"""Every Prometheus metric of recordsync: one module per concept, every name in ``names``.

- ``names``: every metric name (the daemon's, the receiver's, verify's) and the ``merchant_id``
  label; no other module spells a metric name.
- ``registry``: ``Metrics``, the daemon's registry: the process's series, the fleet's, and
  each merchant's view.
- ``merchant``: one merchant's counters and histograms and the view its observers feed.
- ``book``: what the merchants reported that their gauges show, until a scrape reads it.
- ``scrape``: the gauges, computed at every scrape from the book.
- ``round_events``: the round-end notification receiver's series.
- ``verify_file``: one ``recordsync verify`` run, for node_exporter's textfile collector.

The package imports no layer of recordsync: the layers report through adapters that the service
builds (``service.daemon.observers``), which call a merchant view's methods.
"""

from recordsync.metrics.book import BudgetView
from recordsync.metrics.merchant import (
    MAX_UNKNOWN_FIELDS,
    OTHER_FIELDS_LABEL,
    MerchantMetrics,
    WriteOutcome,
    job_kind,
    sequence_as_float,
)
from recordsync.metrics.names import (
    MERCHANT_LABEL,
    PROCESS_WIDE,
    MetricName,
    RoundEventMetricName,
    VerifyMetricName,
)
from recordsync.metrics.registry import Metrics
from recordsync.metrics.round_events import EventOutcome, RoundEventMetrics, WakeVia
from recordsync.metrics.scrape import estimate_remaining_seconds
from recordsync.metrics.verify_file import record_verify_run

__all__ = [
    "MAX_UNKNOWN_FIELDS",
    "MERCHANT_LABEL",
    "OTHER_FIELDS_LABEL",
    "PROCESS_WIDE",
    "BudgetView",
    "EventOutcome",
    "MerchantMetrics",
    "MetricName",
    "Metrics",
    "RoundEventMetricName",
    "RoundEventMetrics",
    "VerifyMetricName",
    "WakeVia",
    "WriteOutcome",
    "estimate_remaining_seconds",
    "job_kind",
    "record_verify_run",
    "sequence_as_float",
]

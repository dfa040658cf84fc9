"""The metrics of one ``recordsync verify`` run, for the file its ``--metrics-file`` names.

Verify is a one-shot command with no ``/metrics`` server: it puts its run into a registry of
its own, which the command writes for node_exporter's textfile collector (docs/operations.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from recordsync.metrics.names import MERCHANT_LABEL, VerifyMetricName, merchant_label


def record_verify_run(
    registry: CollectorRegistry,
    merchant_id: str,
    *,
    clean: bool,
    differences: Mapping[str, int],
    repaired: int,
    clock: Callable[[], float] = time.time,
) -> None:
    """Put one verify run into ``registry``: its outcome, each kind of difference, repairs."""
    merchant_id = merchant_label(merchant_id)
    runs = Counter(
        VerifyMetricName.RUNS.removesuffix("_total"),
        "Verify runs, by outcome: clean, or differences found (missing, behind or different).",
        [MERCHANT_LABEL, "outcome"],
        registry=registry,
    )
    runs.labels(merchant_id, "clean" if clean else "differences").inc()
    found = Gauge(
        VerifyMetricName.DIFFERENCES,
        "Rows of each kind of difference the last verify run found.",
        [MERCHANT_LABEL, "kind"],
        registry=registry,
    )
    for kind, count in differences.items():
        found.labels(merchant_id, kind).set(count)
    Gauge(
        VerifyMetricName.REPAIRED,
        "Rows the last verify --repair run wrote back from the platform's records.",
        [MERCHANT_LABEL],
        registry=registry,
    ).labels(merchant_id).set(repaired)
    Gauge(
        VerifyMetricName.LAST_RUN,
        "When the last verify run finished (Unix time).",
        [MERCHANT_LABEL],
        registry=registry,
    ).labels(merchant_id).set(clock())

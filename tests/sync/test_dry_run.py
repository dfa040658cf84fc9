"""The dry run's estimate: a request per page of the rows stored (one at least per window),
the anchor's on top for a reset, and the time at the merchant's limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from recordsync.core.models import Limits
from recordsync.core.state import Window
from recordsync.sync.dry_run import estimate, lines

DAY = datetime(2026, 11, 1, tzinfo=UTC)
WINDOWS = [Window(DAY + timedelta(days=n), DAY + timedelta(days=n + 1)) for n in range(3)]
LIMITS = Limits(record_requests=10, record_seconds=2, max_page_size=1000)


def test_pages_of_the_rows_stored_at_the_merchants_limit():
    plan = estimate("backfill of m-1", WINDOWS, [0, 1000, 1001], page_size=500, limits=LIMITS)
    assert [item.requests for item in plan.windows] == [1, 2, 3]
    assert plan.requests == 6
    assert plan.seconds == 6 * 2 / 10
    shown = lines(plan)
    assert shown[0] == "dry run: backfill of m-1"
    assert "1001 rows stored  ~3 requests" in shown[3]
    assert shown[-2].startswith(
        "3 windows, ~6 requests at the merchant's limit of 10 per 2 s: ~1 s"
    )
    assert (
        shown[-1]
        == "dry run: nothing was read from the records or changes, and nothing was written"
    )


def test_a_reset_counts_its_anchor_and_a_long_job_reads_in_minutes():
    days = [Window(DAY + timedelta(days=n), DAY + timedelta(days=n + 1)) for n in range(90)]
    plan = estimate(
        "reset of m-1",
        days,
        [100_000] * 90,
        page_size=1000,
        limits=Limits(record_requests=2, record_seconds=1, max_page_size=1000),
        extra_requests=1,
    )
    assert plan.requests == 90 * 100 + 1
    assert "+ 1 to anchor" in lines(plan)[-2]
    assert "~75 min" in lines(plan)[-2]  # 9,001 requests at 2 per second

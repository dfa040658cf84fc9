"""Benchmark 1, budget utilisation: how much of the platform's rate budget a snapshot uses.

A dense history (``rounds_per_day`` records a day, about 60 full pages per 24 h window) is
backfilled with ``SyncEngine.backfill`` (the snapshot alone) under the platform's default limit
of 2 requests per second, with the simulator adding 0 ms and then 1000 ms to every request.
Utilisation is records/s divided by the ceiling ``max_page_size * record_requests /
record_seconds`` (1000 * 2 / 1 = 2000 records/s).  Two factors explain it: the request rate
(requests/s over the budget's rate) and how full the pages are (the last page of each window
is partial).  The budget spaces requests by the platform's window plus the smaller of the
rate margin and the round trip (budget.py: an answered request had arrived), so at 0 ms the
round trip, a few milliseconds, sets the pace; at 1000 ms, the margin.  The simulator runs in
its own process, as the platform would, and the client counts the 429s (no faults are
injected, so each is a real limit hit).  With ``--sim-in-process`` it runs in this process and
its own counters count the violations; but then its handler threads wait for our GIL before
they can stamp an arrival (measured up to 55 ms late with four pages in flight), an arrival
jitter beyond the 50 ms margin that no separate platform would add.

    .venv/bin/python bench/budget_utilisation.py [--size tiny|full] [--concurrency N]
"""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Final

import harness

from recordsync.core.state import Window
from recordsync.logs import configure_logging
from recordsync.service.app import open_app
from recordsync.sim import FaultRates, SimConfig, Simulator
from recordsync.sync.events import SyncObserver

SIZES: Final = {
    # history_days, rounds_per_day
    "tiny": (0.25, 24_000),
    "full": (4.0, 60_000),
}
LATENCIES_MS: Final = (0, 1000)
TARGET: Final = 0.95
COLD_START_SECONDS: Final = 1.1  # the budget's pause after a start, by design (budget.py)


class Commits(SyncObserver):
    """When each snapshot page was committed, with its record count."""

    def __init__(self) -> None:
        self.pages: list[tuple[float, int]] = []
        self.lock = threading.Lock()

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        with self.lock:
            self.pages.append((time.perf_counter(), records))

    def steady_rate(self) -> float:
        """Records/s between the first and the last commit: the engine's fixed start and stop
        costs left out (the first page's records are not counted: they precede the span)."""
        (first, _), (last, _) = self.pages[0], self.pages[-1]
        return sum(records for _, records in self.pages[1:]) / (last - first)


class Requests:
    """Client-side counts: record requests sent, and 429s (every one a real limit hit: no
    faults are injected here)."""

    def __init__(self) -> None:
        self.sent = 0
        self.rate_limited = 0

    def on_response(
        self,
        endpoint: str,
        status: int | None,
        code: str | None,
        seconds: float,
        request_id: str | None,
    ) -> None:
        if endpoint == "records":
            self.sent += 1

    def on_retry(self, endpoint: str, reason: str, delay: float) -> None:
        pass

    def on_rate_limited(self, endpoint: str, retry_after: float) -> None:
        self.rate_limited += 1


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [
            ("--concurrency", {"type": int, "default": 4, "help": "snapshot_concurrency"}),
            ("--rate-margin", {"type": float, "default": None, "help": "RECORDSYNC_RATE_MARGIN"}),
            (
                "--sim-in-process",
                {
                    "action": "store_true",
                    "help": "the simulator in this process (violations counted by it)",
                },
            ),
        ],
    )
    configure_logging(level="error", log_format="console")
    history_days, rounds_per_day = SIZES[args.size]
    report = harness.Report("budget utilisation during a snapshot", args.size)
    report.header()
    config = SimConfig(history_days=history_days, rounds_per_day=rounds_per_day)
    ceiling = config.max_page_size * config.record_requests / config.record_seconds
    where = "this process" if args.sim_in_process else "its own process"
    report.note(
        f"{rounds_per_day * history_days:,.0f} records over {history_days} days; ceiling "
        f"{ceiling:,.0f} records/s ({config.record_requests} requests per "
        f"{config.record_seconds} s of {config.max_page_size}); snapshot_concurrency "
        f"{args.concurrency}; simulator in {where}"
    )
    for latency in LATENCIES_MS:
        with contextlib.ExitStack() as stack:
            if not args.sim_in_process:
                process = stack.enter_context(
                    harness.sim_process(
                        history_days=history_days,
                        rounds_per_day=rounds_per_day,
                        record_requests=config.record_requests,
                        extra=("--latency-ms", str(latency)),
                    )
                )
                base_url, expected, sim = process.base_url, process.records, None
                end = datetime.now(UTC)
            else:
                sim = stack.enter_context(Simulator(config))
                sim.start()
                sim.set_faults(FaultRates(latency_ms=latency))
                base_url, expected, end = sim.base_url, sim.store.record_count, sim.now()
            start = end - timedelta(days=history_days, hours=1)
            url = stack.enter_context(harness.database("sqlite"))
            overrides: dict[str, object] = {"snapshot_concurrency": args.concurrency}
            if args.rate_margin is not None:
                overrides["rate_margin"] = args.rate_margin
            settings = harness.settings_for(base_url, url, start, **overrides)
            commits, requests = Commits(), Requests()
            with open_app(settings, observer=commits, client_observer=requests) as app:
                time.sleep(COLD_START_SECONDS)
                started = time.perf_counter()
                result = app.engine.backfill(start, end)
                seconds = time.perf_counter() - started
            violations = requests.rate_limited
            if sim is not None:
                violations = sim.stats().rate_limit_violations
        rate = result.records / seconds
        report.add(
            f"{latency} ms latency: utilisation",
            rate / ceiling,
            "",
            target=f">= {TARGET}",
            met=rate / ceiling >= TARGET,
        )
        report.add(f"  {latency} ms: records/s", rate, "rec/s")
        report.add(
            f"  {latency} ms: utilisation, first to last commit",
            commits.steady_rate() / ceiling,
            "",
        )
        budget_rate = config.record_requests / config.record_seconds
        report.add(
            f"  {latency} ms: request rate / budget", requests.sent / seconds / budget_rate, ""
        )
        window = config.record_seconds
        report.add(
            f"  {latency} ms: most the budget allows unanswered (margin {settings.rate_margin} s)",
            window / (window + settings.rate_margin),
            "",
        )
        report.add(f"  {latency} ms: page fill", result.records / max(requests.sent, 1) / 1000, "")
        report.add(
            f"  {latency} ms: rate limit violations",
            violations,
            "",
            target="0",
            met=not violations,
        )
        if result.records != expected:
            report.note(f"{result.records:,} records stored of {expected:,}")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())

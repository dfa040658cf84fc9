"""The simulator's own speed, so that the other benchmarks measure recordsync and not it.

It must build a history quickly and serve pages of 1000 records much faster than the
platform's default limit of 2 requests per second: records pages and record-changes pages per
second over real loopback HTTP, signed by the project's client with the rate limit lifted,
everything in one process (the client's parsing included, so the figures are a floor).  These
were timed assertions in the test suite once; a figure is a benchmark's job, not a test's.

With ``--merchants N`` it first builds N merchants of 2 days x 2000 rounds each (the
multi-merchant tests' fleet) and reports the build time and the memory they take.

    .venv/bin/python bench/simulator.py [--size tiny|full] [--merchants N]
"""

from __future__ import annotations

import os
import resource
import time
from datetime import timedelta
from typing import Final

import harness

from recordsync.core.times import floor_ms
from recordsync.sim import SimConfig, Simulator

SIZES: Final = {"tiny": 5_000, "full": 100_000}  # records in one day of history
PAGE: Final = 1000
FLEET_DAYS: Final = 2
FLEET_ROUNDS_PER_DAY: Final = 2000


def _rss_mb() -> float:
    """This process's resident memory now (Linux: /proc/self/statm, in pages)."""
    with open("/proc/self/statm", encoding="ascii") as statm:  # noqa: PTH123 -- a proc file
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _fleet(report: harness.Report, merchants: int) -> None:
    """Build ``merchants`` merchants of 2 days x 2000 rounds: how long, how much memory."""
    config = SimConfig(
        history_days=FLEET_DAYS,
        rounds_per_day=FLEET_ROUNDS_PER_DAY,
        record_requests=harness.LIFTED_RATE,
    ).with_merchants(merchants)
    before = _rss_mb()
    started = time.perf_counter()
    sim = Simulator(config)
    report.add(
        f"{merchants} merchants x 2 days x 2000 rounds, build", time.perf_counter() - started, "s"
    )
    records = sum(sim.store_of(merchant_id).record_count for merchant_id in sim.merchant_ids)
    report.add("records in all merchants' histories", records, "records")
    report.add("resident memory the merchants added", _rss_mb() - before, "MB")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    report.add("peak RSS of this process so far", peak, "MB")
    del sim


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [("--merchants", {"type": int, "default": 1, "help": "also build N merchants' histories"})],
    )
    rounds = SIZES[args.size]
    report = harness.Report("the simulator's own speed", args.size)
    report.header()
    if args.merchants > 1:
        _fleet(report, args.merchants)
    config = SimConfig(history_days=1, rounds_per_day=rounds, record_requests=harness.LIFTED_RATE)
    started = time.perf_counter()
    with Simulator(config) as sim:
        sim.start()
        report.add(
            "history built, records per second", rounds / (time.perf_counter() - started), "rec/s"
        )
        client = harness.lifted_client(sim)
        end = floor_ms(sim.now())
        start = end - timedelta(hours=24)
        with client:
            started = time.perf_counter()
            pages, page = 1, client.records_first(start, end, limit=PAGE)
            while page.has_more:
                page = client.records_next(page.next_cursor, limit=PAGE)
                pages += 1
            report.add(
                "records pages of 1000 per second",
                pages / (time.perf_counter() - started),
                "pages/s",
            )
            started = time.perf_counter()
            changes, cursor = 0, None
            for _ in range(pages):
                reply = (
                    client.changes(since=start, limit=PAGE)
                    if cursor is None
                    else client.changes(cursor=cursor, limit=PAGE)
                )
                changes += 1
                cursor = reply.next_cursor
                if not reply.has_more:
                    break
            report.add(
                "record-changes pages per second",
                changes / (time.perf_counter() - started),
                "pages/s",
            )
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark 4, memory: peak RSS of ``recordsync backfill`` over a small and a large range.

One simulator process (rate limit lifted) holds the whole history; ``python -m recordsync
backfill --from ... --to ...`` runs as a real child process with its RECORDSYNC_* environment,
once over the newest day (``small`` records) and once over the whole history (``large``), each
into a fresh SQLite file.  Peak RSS comes from ``wait4`` for that child alone: exact, no
sampling.  Pages are streamed and dropped after their commit, so the two peaks should match.

    .venv/bin/python bench/memory.py [--size tiny|full]
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from typing import Final

import harness

SIZES: Final = {
    # history_days, rounds_per_day: small = the newest day, large = every day
    "tiny": (2.0, 10_000),
    "full": (10.0, 100_000),
}
TARGET_MB: Final = 150.0
TARGET_SPREAD: Final = 0.10


def backfill(base_url: str, start: datetime, end: datetime) -> harness.ChildRun:
    with harness.database("sqlite") as url:
        env = harness.environment_for(base_url, url, RECORDSYNC_PAGE_SIZE="1000")
        command = [
            sys.executable,
            "-m",
            "recordsync",
            "backfill",
            "--from",
            harness.iso_ms(start),
            "--to",
            harness.iso_ms(end),
        ]
        run = harness.run_child(command, env, timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(f"backfill exited {run.returncode}:\n{run.output[-2000:]}")
    return run


def main() -> int:
    args = harness.arguments(__doc__.splitlines()[0])
    history_days, rounds_per_day = SIZES[args.size]
    report = harness.Report("peak memory of recordsync backfill", args.size)
    report.header()
    with harness.sim_process(history_days=history_days, rounds_per_day=rounds_per_day) as sim:
        end = datetime.now(UTC)
        report.note(f"{sim.records:,} records over {history_days:.0f} days; SQLite warehouse")
        small = backfill(sim.base_url, end - timedelta(days=1), end)
        large = backfill(sim.base_url, end - timedelta(days=history_days, hours=1), end)
    small_records = rounds_per_day  # one day of the history, to within a few records
    report.add(f"peak RSS, ~{small_records:,} records", small.peak_rss_mb, "MB")
    report.add(
        f"peak RSS, {sim.records:,} records",
        large.peak_rss_mb,
        "MB",
        target=f"<= {TARGET_MB:.0f}",
        met=large.peak_rss_mb <= TARGET_MB,
    )
    spread = abs(large.peak_rss_mb - small.peak_rss_mb) / small.peak_rss_mb
    report.add(
        "difference between the two",
        spread * 100,
        "%",
        target=f"<= {TARGET_SPREAD * 100:.0f}",
        met=spread <= TARGET_SPREAD,
    )
    report.add("large run: records/s", sim.records / large.seconds, "rec/s")
    report.add("large run: CPU per record", large.cpu_seconds / sim.records * 1e6, "us")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())

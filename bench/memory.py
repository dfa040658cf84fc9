"""Benchmark 4, memory: peak RSS of ``recordsync backfill`` over a small and a large history.

``python -m recordsync backfill --from ... --to ...`` runs as a real child process with its
RECORDSYNC_* environment (rate limit lifted, default snapshot concurrency), each time into a
fresh SQLite file; peak RSS comes from ``wait4`` for that child alone: exact, no sampling.

- large: the whole history of a simulator with ``days * rounds_per_day`` records;
- small, same span: a second simulator with a tenth of the records over the same days, so
  the same number of windows is read at once: only the amount of history differs;
- small, newest day: the newest day of the large history, a tenth of the records in one or
  two windows, so fewer windows are in flight at once.

Pages are streamed and dropped after their commit, so memory should not grow with history.

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
    span = timedelta(days=history_days, hours=1)
    with harness.sim_process(history_days=history_days, rounds_per_day=rounds_per_day // 10) as sim:
        end = datetime.now(UTC)
        small_records = sim.records
        small = backfill(sim.base_url, end - span, end)
    with harness.sim_process(history_days=history_days, rounds_per_day=rounds_per_day) as sim:
        end = datetime.now(UTC)
        report.note(f"{sim.records:,} records over {history_days:.0f} days; SQLite warehouse")
        one_day = backfill(sim.base_url, end - timedelta(days=1), end)
        large = backfill(sim.base_url, end - span, end)
    report.add(f"peak RSS, {small_records:,} records, same span", small.peak_rss_mb, "MB")
    report.add(f"peak RSS, ~{rounds_per_day:,} records, newest day", one_day.peak_rss_mb, "MB")
    report.add(
        f"peak RSS, {sim.records:,} records",
        large.peak_rss_mb,
        "MB",
        target=f"<= {TARGET_MB:.0f}",
        met=large.peak_rss_mb <= TARGET_MB,
    )
    for name, other in (("same span", small), ("newest day", one_day)):
        spread = abs(large.peak_rss_mb - other.peak_rss_mb) / other.peak_rss_mb
        report.add(
            f"difference, large vs small ({name})",
            spread * 100,
            "%",
            target=f"<= {TARGET_SPREAD * 100:.0f}" if name == "same span" else "",
            met=spread <= TARGET_SPREAD if name == "same span" else None,
        )
    report.add("large run: records/s", sim.records / large.seconds, "rec/s")
    report.add("large run: CPU per record", large.cpu_seconds / sim.records * 1e6, "us")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())

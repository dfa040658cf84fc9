"""Benchmark 9, the fleet under pauses and cuts: three real replicas, six merchants
with live traffic, on PostgreSQL and on MariaDB.

Each replica reaches the database through a fault proxy and the simulator through another
(tests/support/netfaults.py); the driver (tests/support/fleetchaos.py) pauses a holder (SIGSTOP,
then SIGCONT) or cuts it off from the database (a blackhole, no reset), half of them the moment
its next fenced write has sent its fence check (inside a write). Figures per server: the
takeovers (min, median, max; target <= 15 s), how many landed inside a write, two holders of a
merchant at any sample of every replica's /metrics (target 0), requests of a replica for
merchants it lost (target 0), crashes (0), the longest rebalance after a resume (target <= 60
s), and every merchant equal to the truth with no rate-limit violation at the end.

    .venv/bin/python bench/chaos.py [--size tiny|full] [--check] [--servers postgres,mariadb]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Final

import harness

sys.path.insert(0, str(harness.ROOT / "tests"))

from support.fleetchaos import Chaos, summary

from recordsync.sim import SimConfig, running_simulator

SIZES: Final = {
    # (pauses, cuts, seconds each): tiny proves the script runs
    "tiny": (1, 1, 12.0),
    "full": (10, 10, 0.0),
}
PAUSE_SECONDS: Final = 20.0
CUT_SECONDS: Final = 25.0
TAKEOVER_LIMIT: Final = 15.0
REBALANCE_LIMIT: Final = 60.0


def plan(pauses: int, cuts: int) -> list[tuple[str, bool]]:
    """Pauses and cuts taking turns, every other one of each inside a write."""
    events: list[tuple[str, bool]] = []
    for index in range(max(pauses, cuts)):
        if index < pauses:
            events.append(("pause", index % 2 == 0))
        if index < cuts:
            events.append(("cut", index % 2 == 1))
    return events


def run(server: str, size: str, folder: Path) -> Chaos:
    pauses, cuts, seconds = SIZES[size]
    config = SimConfig(
        merchant_id="chaos",
        secret="chaos-secret-0123456789abcdefghijklmnopqrs",  # noqa: S106 - the simulator's
        seed=61,
        history_days=0.3,
        rounds_per_day=300,
        live_rate=5.0,
        record_requests=10,
    ).with_merchants(6)
    with running_simulator(config, live=True) as sim, harness.database(server) as url:
        chaos = Chaos(
            sim,
            url,
            folder,
            pause_seconds=seconds or PAUSE_SECONDS,
            cut_seconds=seconds or CUT_SECONDS,
            log=lambda line: print(line, flush=True),
        )
        try:
            chaos.start()
            chaos.run(plan(pauses, cuts))
            chaos.finish()
        finally:
            chaos.stop()
    return chaos


def report(report_: harness.Report, server: str, chaos: Chaos) -> None:
    figures = summary(chaos.events)
    takeovers = figures["takeover min/median/max"]
    low, middle, high = takeovers if isinstance(takeovers, tuple) else (0.0, 0.0, 0.0)
    report_.note(
        f"{server}: {figures['events']} events, {figures['inside a write']} inside a write"
    )
    report_.add(f"{server}: takeover, min", low, "s")
    report_.add(f"{server}: takeover, median", middle, "s")
    report_.add(
        f"{server}: takeover, max",
        high,
        "s",
        target=f"<= {TAKEOVER_LIMIT:g}",
        met=high <= TAKEOVER_LIMIT and figures["not taken over"] == 0,
    )
    for name in ("double holds seen", "requests after the lease", "crashed"):
        value = int(figures[name])  # type: ignore[call-overload]
        report_.add(f"{server}: {name}", value, "", target="0", met=value == 0)
    rebalanced = float(figures["rebalanced max"] or 0.0)  # type: ignore[arg-type]
    report_.add(
        f"{server}: rebalance after a resume, max",
        rebalanced,
        "s",
        target=f"<= {REBALANCE_LIMIT:g}",
        met=rebalanced <= REBALANCE_LIMIT,
    )


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [("--servers", {"default": "postgres,mariadb", "help": "comma-separated"})],
    )
    result = harness.Report("the fleet under pauses and cuts", args.size)
    result.header()
    with tempfile.TemporaryDirectory() as name:
        for server in args.servers.split(","):
            folder = Path(name) / server
            folder.mkdir()
            report(result, server, run(server, args.size, folder))
    return result.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())

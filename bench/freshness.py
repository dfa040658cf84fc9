"""Benchmark 3, freshness: from a change on the platform to its row in the warehouse.

The daemon (``SyncEngine.run``, default poll interval) first catches up with a small history,
then the simulator generates live traffic at ``live_rate`` events a second.  A watcher reads
the warehouse every 20 ms and notes when each (record_id, revision) first becomes visible; its
delay is that moment minus the change's ``updated_at`` (the simulator's ``changed_at``; the
simulator and the watcher read the same machine clock).  The watcher's 20 ms period adds at
most 20 ms to a delay.  The simulator counts every request against the platform's default
limit (2 per second) and must never see a violation.

    .venv/bin/python bench/freshness.py [--size tiny|full]
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Final

import harness
from sqlalchemy import select

from recordsync.core.state import Phase
from recordsync.core.stopping import Stopper
from recordsync.logs import configure_logging
from recordsync.service.app import open_app
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse
from recordsync.warehouse.schema import records

SIZES: Final = {
    # seconds of live traffic, live events per second
    "tiny": (6.0, 5.0),
    "full": (180.0, 5.0),
}
TARGET_P99: Final = 1.5
WATCH_PERIOD: Final = 0.02


class Watcher:
    """Notes when each (record_id, revision) first becomes visible in the warehouse."""

    def __init__(self, warehouse: Warehouse, merchant_id: str, since: datetime) -> None:
        self.warehouse = warehouse
        self.merchant_id = merchant_id
        self.since = since
        self.delays: dict[tuple[str, int], float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def _run(self) -> None:
        columns = records.c
        # synced_at is stamped when the page's transaction starts, so a row can become
        # visible a little after a later-stamped one: look back a few seconds, keep the first.
        look_from = self.since
        while not self.stop.wait(WATCH_PERIOD):
            query = select(columns.record_id, columns.revision, columns.updated_at).where(
                columns.merchant_id == self.merchant_id,
                columns.synced_at >= look_from - timedelta(seconds=5),
                columns.updated_at >= self.since,
            )
            with self.warehouse.engine.connect() as conn:
                rows = conn.execute(query).all()
            seen = time.time()
            for record_id, revision, updated_at in rows:
                key = (record_id, revision)
                if key not in self.delays:
                    self.delays[key] = seen - updated_at.timestamp()
            look_from = datetime.now(UTC)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> int:
    args = harness.arguments(__doc__.splitlines()[0])
    configure_logging(level="warning", log_format="console")
    seconds, live_rate = SIZES[args.size]
    report = harness.Report("freshness under an idle tail with live traffic", args.size)
    report.header()
    config = SimConfig(history_days=0.1, rounds_per_day=5000, live_rate=live_rate)
    with Simulator(config) as sim, harness.database("sqlite") as url:
        sim.start()
        settings = harness.settings_for(sim.base_url, url, sim.now() - timedelta(days=1))
        report.note(
            f"poll interval {settings.poll_interval} s (the default); {live_rate} live events/s "
            f"for {seconds:.0f} s; limit {config.record_requests} requests per "
            f"{config.record_seconds} s"
        )
        stopper = Stopper()
        with open_app(settings, stopper=stopper) as app:
            daemon = threading.Thread(target=app.engine.run, name="daemon", daemon=True)
            daemon.start()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                state = app.warehouse.load_state(config.merchant_id)
                if state is not None and state.phase is Phase.TAILING:
                    break
                time.sleep(0.1)
            time.sleep(2.0)  # the tail has drained whatever the snapshot left behind
            watcher = Watcher(app.warehouse, config.merchant_id, sim.now())
            watcher.thread.start()
            sim.start_live()
            time.sleep(seconds)
            sim.stop_live()
            time.sleep(3.0)  # the last changes reach the warehouse
            watcher.stop.set()
            watcher.thread.join()
            stopper.stop()
            daemon.join(timeout=30)
        stats = sim.stats()
    delays = list(watcher.delays.values())
    if not delays:
        report.note("no live change reached the warehouse")
        return report.finish(check=args.check) or 1
    report.add("revisions observed", len(delays), "")
    report.add("delay p50", percentile(delays, 0.50), "s")
    report.add("delay p90", percentile(delays, 0.90), "s")
    p99 = percentile(delays, 0.99)
    report.add("delay p99", p99, "s", target=f"<= {TARGET_P99}", met=p99 <= TARGET_P99)
    report.add("delay max", max(delays), "s")
    report.add(
        "rate limit violations",
        stats.rate_limit_violations,
        "",
        target="0",
        met=stats.rate_limit_violations == 0,
    )
    report.add("most requests in one window", stats.max_requests_in_window, "")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark 3, freshness: from a change on the platform to its row in the warehouse.

The daemon (``SyncEngine.run``, default poll interval) first catches up with a small history,
then the simulator generates live traffic at ``live_rate`` events a second.  A watcher reads
the warehouse every 20 ms and notes when each (record_id, revision) first becomes visible; its
delay is that moment minus the change's ``updated_at`` (the simulator's ``changed_at``; the
simulator and the watcher read the same machine clock).  The watcher's 20 ms period adds at
most 20 ms to a delay.  The simulator counts every request against the platform's default
limit (2 per second) and must never see a violation.

``--events``: the poll interval is 20 s and round-end notifications wake the tail.
The simulator runs in its own process (its own GIL, as the platform would) and announces every
live round that ends (signed, retried, replies read strictly) to the receiver
(``RoundEventReceiver`` on a real socket, storing into the warehouse and waking the engine's
tail).  The figure judged is the delay from a round's end (the notification's occurred_at) to
its ended row in the warehouse; changes that end no round (most of the simulator's live
revisions touch older rounds) are announced by nobody and wait for the next wake-up or poll:
their delays are printed for context.  Violations are the 429s our client received.

    .venv/bin/python bench/freshness.py [--size tiny|full] [--events]
"""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import harness
from sqlalchemy import select

from recordsync.core.round_events import RoundEvent, RoundEventReceipt
from recordsync.core.secret import Secret
from recordsync.core.settings import Settings
from recordsync.core.state import Phase
from recordsync.core.stopping import Stopper
from recordsync.logs import configure_logging
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.service.ports.round_events.receiver import (
    EventsServer,
    RoundEventReceiver,
    asgi_app,
)
from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET, SimConfig, Simulator
from recordsync.warehouse import Warehouse
from recordsync.warehouse.schema import records, round_events

SIZES: Final = {
    # seconds of live traffic, live events per second
    "tiny": (6.0, 5.0),
    "full": (180.0, 5.0),
}
TARGET_P99: Final = 1.5
WATCH_PERIOD: Final = 0.02
# --events: the target with the poll interval at 20 s.
EVENTS_POLL_INTERVAL: Final = 20.0
TARGET_EVENTS_P95: Final = 1.0
# Live events per second with --events: the simulator ends a round in about 1 event of 100
# (most revise older rounds), so more traffic gives the round-end figure enough samples.
EVENTS_LIVE_RATE: Final = {"tiny": 20.0, "full": 20.0}
DEFAULT_RECORD_REQUESTS: Final = 2  # the platform's default limit, per second


class Watcher:
    """Notes when each (record_id, revision) first becomes visible in the warehouse."""

    def __init__(self, warehouse: Warehouse, merchant_id: str, since: datetime) -> None:
        self.warehouse = warehouse
        self.merchant_id = merchant_id
        self.since = since
        self.delays: dict[tuple[str, int], float] = {}
        self.closed_seen: dict[str, float] = {}  # round_id -> when first seen ended
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def _run(self) -> None:
        columns = records.c
        # synced_at is stamped when the page's transaction starts, so a row can become
        # visible a little after a later-stamped one: look back a few seconds, keep the first.
        look_from = self.since
        while not self.stop.wait(WATCH_PERIOD):
            query = select(
                columns.record_id,
                columns.revision,
                columns.updated_at,
                columns.round_id,
                columns.status,
            ).where(
                columns.merchant_id == self.merchant_id,
                columns.synced_at >= look_from - timedelta(seconds=5),
                columns.updated_at >= self.since,
            )
            with self.warehouse.engine.connect() as conn:
                rows = conn.execute(query).all()
            seen = time.time()
            for record_id, revision, updated_at, round_id, status in rows:
                key = (record_id, revision)
                if key not in self.delays:
                    self.delays[key] = seen - updated_at.timestamp()
                if status != "OPEN":
                    self.closed_seen.setdefault(round_id, seen)
            look_from = datetime.now(UTC)


class Forward:
    """The receiver's store and wake-up, pointed at the app once it exists: the simulator must
    know the receiver's URL before the app (which needs the simulator's) can be built."""

    app: MerchantCommand | None = None

    def store(self, event: RoundEvent) -> RoundEventReceipt:
        assert self.app is not None
        return self.app.warehouse.events.record_round_event(event, received_by="bench")

    def wake(self, _event: RoundEvent) -> None:
        assert self.app is not None
        self.app.tail.wake_tail()


def receiver_server(forward: Forward, secret: str) -> EventsServer:
    """``RoundEventReceiver`` on a real socket, as the daemon runs it."""
    receiver = RoundEventReceiver(
        secrets=lambda merchant_id: (Secret(secret),) if merchant_id == DEMO_MERCHANT_ID else None,
        store=forward.store,
        wake=forward.wake,
    )
    return EventsServer(asgi_app(receiver), host="127.0.0.1", port=0)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _figures(report: harness.Report, delays: list[float]) -> None:
    """The delays against the target: p99 <= 1.5 s polling every second."""
    report.add("revisions observed", len(delays), "")
    report.add("delay p50", percentile(delays, 0.50), "s")
    report.add("delay p90", percentile(delays, 0.90), "s")
    p99 = percentile(delays, 0.99)
    report.add("delay p99", p99, "s", target=f"<= {TARGET_P99}", met=p99 <= TARGET_P99)
    report.add("delay max", max(delays), "s")


def _live_run(sim: Simulator, settings: Settings, seconds: float) -> Watcher:
    """The engine caught up, then ``seconds`` of live traffic watched; the watcher."""
    stopper = Stopper()
    with MerchantCommand(settings, None, stopper) as app:
        daemon = threading.Thread(target=app.tail.run, name="daemon", daemon=True)
        daemon.start()
        _wait_for_tailing(app)
        watcher = Watcher(app.warehouse, sim.config.merchant_id, sim.now())
        watcher.thread.start()
        sim.start_live()
        time.sleep(seconds)
        sim.stop_live()
        time.sleep(3.0)  # the last changes reach the warehouse
        watcher.stop.set()
        watcher.thread.join()
        stopper.stop()
        daemon.join(timeout=30)
    return watcher


class RateLimited:
    """The client's observer: counts 429 answers (the simulator in its own process refuses
    every request over the limit with one, so each is a violation)."""

    def __init__(self) -> None:
        self.count = 0

    def on_response(self, *_args: object) -> None:
        pass

    def on_retry(self, *_args: object) -> None:
        pass

    def on_rate_limited(self, endpoint: str, retry_after: float) -> None:
        self.count += 1


def stored_round_ends(
    warehouse: Warehouse, since: datetime, until: datetime
) -> list[tuple[str, float]]:
    """(round_id, its end) of the notifications the receiver stored for rounds ended in
    ``[since, until)``."""
    columns = round_events.c
    query = select(columns.round_id, columns.occurred_at).where(
        columns.occurred_at >= since, columns.occurred_at < until
    )
    with warehouse.engine.connect() as conn:
        return [(round_id, occurred.timestamp()) for round_id, occurred in conn.execute(query)]


def _events_main(args: Any, report: harness.Report) -> int:
    """``--events``: the simulator in its own process (its own GIL, as the platform), live
    traffic announcing each round that ends to the receiver; the engine polls every 20 s."""
    seconds = SIZES[args.size][0]
    live_rate = EVENTS_LIVE_RATE[args.size]
    forward = Forward()
    limited = RateLimited()
    server = receiver_server(forward, DEMO_SECRET)
    with (
        server,
        harness.database("sqlite") as url,
        harness.sim_process(
            history_days=0.1,
            rounds_per_day=5000,
            record_requests=DEFAULT_RECORD_REQUESTS,
            live_rate=live_rate,
            extra=("--events-url", f"http://127.0.0.1:{server.port}"),
        ) as sim,
    ):
        history_from = datetime.now(UTC) - timedelta(days=1)
        settings = harness.settings_for(
            sim.base_url, url, history_from, poll_interval=EVENTS_POLL_INTERVAL
        )
        report.note(
            f"poll interval {settings.poll_interval} s; {live_rate} live events/s for "
            f"{seconds:.0f} s; limit {DEFAULT_RECORD_REQUESTS} requests per 1 s; the simulator "
            "in its own process"
        )
        stopper = Stopper()
        with MerchantCommand(settings, None, stopper, client_observer=limited) as app:
            forward.app = app
            daemon = threading.Thread(target=app.tail.run, name="daemon", daemon=True)
            daemon.start()
            _wait_for_tailing(app)
            since = datetime.now(UTC)
            watcher = Watcher(app.warehouse, DEMO_MERCHANT_ID, since)
            watcher.thread.start()
            time.sleep(seconds)
            until = datetime.now(UTC)
            time.sleep(3.0)  # the last rounds of the window reach the warehouse
            watcher.stop.set()
            watcher.thread.join()
            ends = stored_round_ends(app.warehouse, since, until)
            stopper.stop()
            daemon.join(timeout=30)
    delays = [watcher.closed_seen.get(round_id, math.inf) - ended for round_id, ended in ends]
    everything = list(watcher.delays.values())
    report.add("revisions observed", len(everything), "")
    if everything:
        report.add("delay p50 (every revision)", percentile(everything, 0.50), "s")
        report.add("delay p95 (every revision)", percentile(everything, 0.95), "s")
    report.add("rounds ended, announced and stored", len(delays), "")
    if delays:
        report.add("round end to its row p50", percentile(delays, 0.50), "s")
        p95 = percentile(delays, 0.95)
        report.add(
            "round end to its row p95",
            p95,
            "s",
            target=f"<= {TARGET_EVENTS_P95}",
            met=p95 <= TARGET_EVENTS_P95,
        )
        report.add("round end to its row p99", percentile(delays, 0.99), "s")
        report.add("round end to its row max", max(delays), "s")
    report.add("rate limit violations (429s)", limited.count, "", target="0", met=not limited.count)
    return report.finish(check=args.check)


def _wait_for_tailing(app: MerchantCommand) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = app.warehouse.state.load_state(app.merchant_id)
        if state is not None and state.phase is Phase.TAILING:
            break
        time.sleep(0.1)
    time.sleep(2.0)  # the tail has drained whatever the snapshot left behind


def main() -> int:
    args = harness.arguments(
        __doc__.splitlines()[0],
        [("--events", {"action": "store_true", "help": "poll every 20 s, woken by events"})],
    )
    configure_logging(level="warning", log_format="console")
    if args.events:
        title = "freshness with round-end notifications, poll 20 s, live traffic"
        report = harness.Report(title, args.size)
        report.header()
        return _events_main(args, report)
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
        watcher = _live_run(sim, settings, seconds)
        stats = sim.stats()
    delays = list(watcher.delays.values())
    if not delays:
        report.note("no live change reached the warehouse")
        return report.finish(check=args.check) or 1
    _figures(report, delays)
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

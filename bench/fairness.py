"""Benchmark 10, fairness under load: a merchant with a backlog of changes never
starves the others in the same process.

One ``recordsync run`` process (a real child, every merchant in its ``[[merchants]]``, every
setting the default: poll interval 1 s, pages of 1000) syncs the merchants of one simulator
process (each with its own secret, a small history, the default limit of 2 requests a second
and live traffic of 5 changes a second) into a new database (PostgreSQL unless ``--backend``),
dropped afterwards.  Once every merchant tails and a few polls more have passed:

- before: a window of live traffic alone;
- the burst: the simulator appends 50 000 changes (tiny: 5 000) to the first merchant's change
  stream at one instant (live events: revisions of its records, and new rounds), and the
  window runs until that merchant's tail has caught up with them: its /metrics show a
  committed sequence at or past the burst's newest and no page left
  (``recordsync_tail_last_sequence``, ``recordsync_tail_has_more``, read every 0.25 s).  Its
  drain time runs from the burst to that page's commit (``recordsync_last_commit_timestamp_
  seconds``), against the burst's pages at the limit (50 pages at 2 a second: 25 s).

For every other merchant, in each window: the delay from a change (its ``updated_at``, the
simulator's clock, which is this machine's) to its row in the warehouse, watched every 25 ms
as ``freshness.py`` does, p50 / p95 / max by the window its change fell in; its change polls a
second (``recordsync_platform_requests_total``); the mean time of its change requests and of
its page commits (the daemon's histograms), which say where a slowdown would come from; and
the CPU of the daemon and of the database server.  429 answers over the whole run (target 0).

The simulator runs in its own process (its own GIL, as the platform's): this script again,
``--serve-simulator`` and then ``recordsync sim``'s options, serving as ``recordsync sim``
does and taking one command on its standard input, ``burst MERCHANT CHANGES``
(``Simulator.step``), answered with the burst's instant and the merchant's new watermark.

``--tree PATH`` runs the daemon from another checkout (``PYTHONPATH=PATH``, started in it, so
``python -m recordsync`` imports that tree), the simulator and this script from this one, so
that a tree from before a change is measured by the same bench.

    .venv/bin/python bench/fairness.py [--size tiny|full] [--check]
        [--backend sqlite|postgres|mariadb] [--tree PATH]
"""

from __future__ import annotations

import collections
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Final, Self

import harness
import httpx
from fleet import Warehouse, daemon, write_config
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, pool, select

from recordsync.metrics import MetricName
from recordsync.sim import Simulator
from recordsync.sim import cli as sim_cli
from recordsync.warehouse.schema import records


@dataclass(frozen=True, slots=True)
class Size:
    merchants: int
    burst: int  # changes appended to one merchant's stream at once
    before_seconds: float  # live traffic alone, measured
    settle_seconds: float  # tailing before the measurement starts


SIZES: Final = {
    "tiny": Size(3, 5_000, 5.0, 2.0),
    "full": Size(5, 50_000, 30.0, 5.0),
}
HISTORY: Final = (0.05, 2_000)  # history_days, rounds_per_day: ~100 records a merchant
LIVE_RATE: Final = 5.0  # changes a second per merchant, from the simulator's start
POLL: Final = 1.0  # the daemon's default poll interval
LIMIT: Final = 2  # requests a second per merchant: the platform's default limit
PAGE: Final = 1000  # the daemon's default page size
TARGET_P95: Final = POLL + 1.0
POLL_SHARE: Final = 0.1  # change polls within 10 % of 1 / POLL
WATCH_PERIOD: Final = 0.025
READ_PERIOD: Final = 0.25  # /metrics while the burst drains
LATE_SECONDS: Final = 5.0  # watched after the drain: the window's last changes on their way
TIMEOUT: Final = 900.0
SERVE_SIMULATOR: Final = "--serve-simulator"
CHANGES: Final = "record-changes"


# -- the simulator's process: recordsync sim, and a burst on command ---------------------------


def serve_simulator(argv: Sequence[str]) -> int:
    """``recordsync sim`` with ``argv`` until SIGTERM (or the end of standard input), taking
    ``burst MERCHANT CHANGES`` lines on standard input."""
    args = sim_cli.build_parser().parse_args(argv)
    config = sim_cli.config_from(args)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    with Simulator(config) as simulator:
        simulator.start(host=args.host, port=args.port)
        simulator.start_live()
        # Announced as ``recordsync sim`` does, which ``harness.sim_process`` reads.
        print(f"base_url={simulator.base_url}", flush=True)
        for profile in config.profiles:
            store = simulator.store_of(profile.merchant_id)
            print(
                f"merchant_id={profile.merchant_id} secret={profile.secret} "
                f"records={store.record_count} watermark={store.watermark()}",
                flush=True,
            )
        commands = threading.Thread(
            target=_take_commands, args=(simulator, stop), name="commands", daemon=True
        )
        commands.start()
        while not stop.wait(0.5):
            pass
    return 0


def _take_commands(simulator: Simulator, stop: threading.Event) -> None:
    for line in sys.stdin:
        verb, merchant_id, changes = line.split()
        if verb != "burst":
            print(f"unknown command {line!r}", file=sys.stderr, flush=True)
            continue
        started = time.time()
        # One call: every change stamped with this instant, appended under the merchant's
        # lock while the other merchants are served.
        simulator.step(int(changes), merchant_id=merchant_id)
        seconds = time.time() - started
        print(
            f"burst merchant_id={merchant_id} changes={changes} started={started:.6f} "
            f"seconds={seconds:.6f} watermark={simulator.watermark(merchant_id)}",
            flush=True,
        )
    stop.set()  # the bench is gone


@dataclass(frozen=True, slots=True)
class Burst:
    merchant_id: str
    changes: int
    started: float  # Unix time: every change of the burst has it as its updated_at
    seconds: float  # the simulator's time to append them
    watermark: int  # the merchant's newest sequence right after


def send_burst(sim: harness.SimProcess, merchant_id: str, changes: int) -> Burst:
    stdin, stdout = sim.process.stdin, sim.process.stdout
    assert stdin is not None
    assert stdout is not None
    stdin.write(f"burst {merchant_id} {changes}\n")
    stdin.flush()
    facts = dict(part.partition("=")[::2] for part in stdout.readline().split()[1:])
    return Burst(
        merchant_id=facts["merchant_id"],
        changes=int(facts["changes"]),
        started=float(facts["started"]),
        seconds=float(facts["seconds"]),
        watermark=int(facts["watermark"]),
    )


# -- the daemon ---------------------------------------------------------------------------------


def imported_from(tree: Path | None) -> str:
    """Where the daemon imports ``recordsync`` from, and that tree's commit."""
    code = harness.tree_code(tree)
    changes = ", with uncommitted changes" if code.dirty else ""
    return f"{code.package} ({code.commit or 'no git commit'}{changes})"


# -- what the daemon says: /metrics, and its CPU ------------------------------------------------


POLL_TIME: Final = "poll"  # a merchant's change requests
WRITE_TIME: Final = "write"  # a merchant's page commits
TIMED: Final[dict[str, str]] = {
    MetricName.PLATFORM_REQUEST_DURATION: POLL_TIME,
    MetricName.WAREHOUSE_WRITE_DURATION: WRITE_TIME,
}


@dataclass(frozen=True, slots=True)
class Reading:
    """The daemon's /metrics at one moment, per merchant, and the processes' CPU so far."""

    at: float  # Unix time, read just before the scrape
    polls: dict[str, float]  # change requests so far, every status
    # POLL_TIME or WRITE_TIME -> merchant -> (seconds, count) so far
    times: dict[str, dict[str, tuple[float, float]]]
    has_more: dict[str, float]
    last_sequence: dict[str, float]
    last_commit: dict[str, float]  # Unix time of the merchant's last committed page
    rate_limited: float  # 429 answers, every merchant
    cpu: dict[str, float]  # "daemon", "simulator", "server" (0 for SQLite): user + system s

    @classmethod
    def read(cls, port: int, daemon: int, simulator: int, backend: str) -> Reading:
        """``daemon``, ``simulator``: their process ids."""
        at = time.time()
        cpu = {
            "daemon": harness.process_cpu_seconds(daemon),
            "simulator": harness.process_cpu_seconds(simulator),
            "server": harness.server_cpu_seconds(backend),
        }
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        polls: collections.defaultdict[str, float] = collections.defaultdict(float)
        sums: dict[str, dict[str, float]] = collections.defaultdict(dict)
        counts: dict[str, dict[str, float]] = collections.defaultdict(dict)
        gauges: dict[str, dict[str, float]] = collections.defaultdict(dict)
        limited = 0.0
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                name, labels = sample.name, sample.labels
                merchant = labels.get("merchant_id", "")
                timed = TIMED.get(family.name)
                if name == MetricName.PLATFORM_REQUESTS and labels["endpoint"] == CHANGES:
                    polls[merchant] += sample.value
                elif name == MetricName.PLATFORM_RATE_LIMITED:
                    limited += sample.value
                elif timed is not None and labels.get("endpoint", CHANGES) == CHANGES:
                    if name == f"{family.name}_sum":
                        sums[timed][merchant] = sample.value
                    elif name == f"{family.name}_count":
                        counts[timed][merchant] = sample.value
                elif name in {
                    MetricName.TAIL_HAS_MORE,
                    MetricName.TAIL_LAST_SEQUENCE,
                    MetricName.LAST_COMMIT,
                }:
                    gauges[name][merchant] = sample.value
        times = {
            kind: {
                merchant: (seconds, counts[kind].get(merchant, 0.0))
                for merchant, seconds in sums[kind].items()
            }
            for kind in (POLL_TIME, WRITE_TIME)
        }
        return cls(
            at=at,
            polls=dict(polls),
            times=times,
            has_more=gauges[MetricName.TAIL_HAS_MORE],
            last_sequence=gauges[MetricName.TAIL_LAST_SEQUENCE],
            last_commit=gauges[MetricName.LAST_COMMIT],
            rate_limited=limited,
            cpu=cpu,
        )

    def drained(self, burst: Burst) -> bool:
        """The burst merchant's tail has committed the burst's newest change, and its last page
        left nothing behind.  The sequence is a float on /metrics (exact to 4096 near 2**64),
        far finer than the burst; a page read before the burst ended 50 000 sooner."""
        merchant = burst.merchant_id
        sequence = self.last_sequence.get(merchant, 0.0)
        return sequence >= float(burst.watermark) and self.has_more.get(merchant) == 0


@dataclass(frozen=True, slots=True)
class Window:
    """Two readings, and the merchants' figures between them."""

    name: str
    start: Reading
    end: Reading

    @property
    def seconds(self) -> float:
        return self.end.at - self.start.at

    def polls(self, merchant: str) -> float:
        done = self.end.polls.get(merchant, 0.0) - self.start.polls.get(merchant, 0.0)
        return done / self.seconds

    def mean(self, kind: str, merchants: Sequence[str]) -> float:
        """The mean time of the merchants' change requests (``POLL_TIME``) or page commits
        (``WRITE_TIME``) in the window, in seconds; NaN when none."""
        seconds = count = 0.0
        for merchant in merchants:
            end_seconds, end_count = self.end.times[kind].get(merchant, (0.0, 0.0))
            start_seconds, start_count = self.start.times[kind].get(merchant, (0.0, 0.0))
            seconds += end_seconds - start_seconds
            count += end_count - start_count
        return seconds / count if count else float("nan")

    def core(self, process: str) -> float:
        """CPU seconds a wall second of the "daemon", the "simulator" or the "server"."""
        return (self.end.cpu[process] - self.start.cpu[process]) / self.seconds


# -- the warehouse, watched ----------------------------------------------------------------------


class Watcher:
    """Notes when each (record_id, revision) of the watched merchants first becomes visible in
    the warehouse, read every ``WATCH_PERIOD`` in this process (not the daemon's)."""

    def __init__(self, url: str, merchants: Sequence[str], since: float) -> None:
        self.engine = create_engine(url, poolclass=pool.NullPool)
        self.merchants = tuple(merchants)
        self.since = datetime.fromtimestamp(since, UTC)
        # (merchant, record_id, revision) -> (its updated_at, when first seen), Unix times
        self.seen: dict[tuple[str, str, int], tuple[float, float]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.engine.dispose()

    def _run(self) -> None:
        columns = records.c
        # synced_at is stamped when a page's transaction starts, so a row can become visible
        # a little after a later-stamped one: look back a few seconds, keep the first sight.
        look_from = self.since
        with self.engine.connect() as conn:
            while not self.stop.wait(WATCH_PERIOD):
                query = select(
                    columns.merchant_id, columns.record_id, columns.revision, columns.updated_at
                ).where(
                    columns.merchant_id.in_(self.merchants),
                    columns.updated_at >= self.since,
                    columns.synced_at >= look_from - timedelta(seconds=5),
                )
                rows = conn.execute(query).all()
                conn.rollback()  # a fresh snapshot next time (PostgreSQL, MariaDB)
                seen = time.time()
                for merchant, record_id, revision, updated_at in rows:
                    key = (merchant, record_id, revision)
                    if key not in self.seen:
                        self.seen[key] = (updated_at.timestamp(), seen)
                look_from = datetime.fromtimestamp(seen, UTC)

    def delays(self, start: float, end: float, merchant: str | None = None) -> list[float]:
        """Delays of the changes made in [start, end), of one merchant or of all, sorted."""
        return sorted(
            seen - changed
            for (owner, _, _), (changed, seen) in self.seen.items()
            if start <= changed < end and merchant in {None, owner}
        )


def percentile(ordered: Sequence[float], share: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# -- the run -------------------------------------------------------------------------------------


@dataclass
class Run:
    backend: str
    merchants: tuple[str, ...]
    burst_merchant: str
    catch_up: float
    burst: Burst
    drained_at: float  # Unix time of the page that caught up with the burst
    before: Window
    during: Window  # from the burst to its drain
    rate_limited: float
    delays: dict[str, dict[str | None, list[float]]] = field(default_factory=dict)

    @property
    def others(self) -> tuple[str, ...]:
        return tuple(merchant for merchant in self.merchants if merchant != self.burst_merchant)

    @property
    def drain_seconds(self) -> float:
        return self.drained_at - self.burst.started


def run(size: Size, backend: str, tree: Path | None, folder: Path) -> Run:
    days, rounds = HISTORY
    with (
        harness.sim_process(
            history_days=days,
            rounds_per_day=rounds,
            record_requests=LIMIT,
            live_rate=LIVE_RATE,
            merchants=size.merchants,
            launcher=(str(Path(__file__).resolve()), SERVE_SIMULATOR),
            commands=True,
        ) as sim,
        harness.database(backend) as url,
    ):
        merchants = tuple(merchant_id for merchant_id, _ in sim.merchants)
        burst_merchant, others = merchants[0], merchants[1:]
        port = harness.free_port()
        config = write_config(sim, url, folder, days, port)
        log = folder / "fairness.log"
        warehouse = Warehouse(url)
        try:
            with daemon(config, log, tree=tree) as process:
                watched = (process, log)
                catch_up = harness.wait_until(
                    lambda: warehouse.tailing() == size.merchants, watched, timeout=TIMEOUT
                )
                time.sleep(size.settle_seconds)

                def reading() -> Reading:
                    return Reading.read(port, process.pid, sim.pid, backend)

                with Watcher(url, others, since=time.time()) as watcher:
                    first = reading()
                    time.sleep(size.before_seconds)
                    at_burst = reading()
                    burst = send_burst(sim, burst_merchant, size.burst)
                    readings = [at_burst]

                    def drained() -> bool:
                        readings.append(reading())
                        return readings[-1].drained(burst)

                    harness.wait_until(drained, watched, period=READ_PERIOD, timeout=TIMEOUT)
                    time.sleep(LATE_SECONDS)
                last = readings[-1]
                rate_limited = reading().rate_limited
        finally:
            warehouse.close()
    result = Run(
        backend=backend,
        merchants=merchants,
        burst_merchant=burst_merchant,
        catch_up=catch_up,
        burst=burst,
        drained_at=min(last.last_commit.get(burst_merchant, last.at), last.at),
        before=Window("before", first, at_burst),
        during=Window("during", at_burst, last),
        rate_limited=rate_limited,
    )
    spans = {
        "before": (first.at, burst.started),
        "during": (burst.started, result.drained_at),
    }
    for name, (start, end) in spans.items():
        result.delays[name] = {
            merchant: watcher.delays(start, end, merchant) for merchant in (None, *others)
        }
    return result


# -- the report ----------------------------------------------------------------------------------


def report_run(report: harness.Report, run_: Run) -> None:
    burst = run_.burst
    at_limit = burst.changes / PAGE / LIMIT
    others = run_.others
    report.add("catch-up: every merchant tailing", run_.catch_up, "s")
    report.add(f"burst: changes appended to {burst.merchant_id}", burst.changes, "")
    report.add("burst: the simulator's time to append them", burst.seconds, "s")
    report.add("burst merchant: drain time", run_.drain_seconds, "s")
    report.add(f"burst merchant: its {at_limit * LIMIT:.0f} pages at {LIMIT}/s", at_limit, "s")
    report.add(
        f"burst merchant: change polls while it drains (limit {LIMIT})",
        run_.during.polls(burst.merchant_id),
        "req/s",
    )
    for window in (run_.before, run_.during):
        judged = window is run_.during
        name = "before the burst" if window is run_.before else "during the drain"
        delays = run_.delays[window.name][None]
        report.add(f"others, {name}: changes seen", len(delays), "")
        report.add(f"others, {name}: delay p50", percentile(delays, 0.50), "s")
        p95 = percentile(delays, 0.95)
        report.add(
            f"others, {name}: delay p95",
            p95,
            "s",
            target=f"<= {TARGET_P95:g}" if judged else "",
            met=p95 <= TARGET_P95 if judged else None,
        )
        report.add(f"others, {name}: delay max", max(delays, default=float("nan")), "s")
        rates = [window.polls(merchant) for merchant in others]
        low, high = (1 - POLL_SHARE) / POLL, (1 + POLL_SHARE) / POLL
        report.add(
            f"others, {name}: change polls, slowest merchant",
            min(rates),
            "req/s",
            target=f">= {low:.2f}" if judged else "",
            met=min(rates) >= low if judged else None,
        )
        report.add(
            f"others, {name}: change polls, fastest merchant",
            max(rates),
            "req/s",
            target=f"<= {high:.2f}" if judged else "",
            met=max(rates) <= high if judged else None,
        )
        report.add(
            f"others, {name}: change request, mean", window.mean(POLL_TIME, others) * 1000, "ms"
        )
        report.add(
            f"others, {name}: page commit, mean", window.mean(WRITE_TIME, others) * 1000, "ms"
        )
        report.add(
            f"burst merchant, {name}: page commit, mean",
            window.mean(WRITE_TIME, [burst.merchant_id]) * 1000,
            "ms",
        )
        report.add(f"daemon CPU, {name}", window.core("daemon") * 100, "% core")
        report.add(f"simulator CPU, {name}", window.core("simulator") * 100, "% core")
        if run_.backend != "sqlite":  # no server: SQLite writes in the daemon's process
            report.add(f"{run_.backend} server CPU, {name}", window.core("server") * 100, "% core")
    limited = round(run_.rate_limited)
    report.add("429 answers (whole run)", limited, "", target="0", met=limited == 0)
    for merchant in others:
        parts = []
        for window in (run_.before, run_.during):
            delays = run_.delays[window.name][merchant]
            parts.append(
                f"{window.name}: {len(delays)} seen, p95 {percentile(delays, 0.95):.3f} s, "
                f"polls {window.polls(merchant):.3f}/s"
            )
        report.note(f"{merchant}: {'; '.join(parts)}")


def main() -> int:
    if sys.argv[1:2] == [SERVE_SIMULATOR]:
        return serve_simulator(sys.argv[2:])
    args = harness.arguments(
        __doc__.splitlines()[0],
        [
            ("--backend", {"choices": harness.BACKENDS, "default": "postgres"}),
            (
                "--tree",
                {"type": Path, "help": "run the daemon from this checkout (PYTHONPATH=PATH)"},
            ),
        ],
    )
    size = SIZES[args.size]
    tree = None if args.tree is None else args.tree.resolve()
    report = harness.Report(
        f"fairness: one merchant's burst among others, {args.backend}", args.size
    )
    report.header()
    report.note(
        f"{size.merchants} merchants in one `recordsync run` process, defaults (poll {POLL:g} s, "
        f"pages of {PAGE}, limit {LIMIT} requests/s each); {LIVE_RATE:g} live changes/s each; "
        f"{size.before_seconds:g} s before the burst; simulator in its own process"
    )
    report.note(f"daemon's code: {imported_from(tree)}")
    with tempfile.TemporaryDirectory() as name:
        report_run(report, run(size, args.backend, tree, Path(name)))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    report.note(f"load average at the end: {load}")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())

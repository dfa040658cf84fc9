"""Work handed to a daemon across its restart, and commands interrupted while they follow, as
an operator meets them: daemons and commands in processes of their own (points 2
and 4).

Before: a resync handed to D1 was taken back by the command 2 s after D1 got SIGTERM (the
lock was free for a moment), and D2, started 3 s later, waited (``lease_waiting``) until the
resync ended, reading no change meanwhile.  A reset interrupted by Ctrl-C ran a minute later
at the next holder.  Now D2 holds the merchant within two ticks of joining, runs the rest of
the job beside its tail, and an interrupted command's request is cancelled (a backfill's is
carried on, as documented) and never runs later.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

import pytest
from support.dbfixtures import BACKEND_PARAMS
from support.fleetcheck import Replica, assert_truth, events, holders, write_config
from support.fleettiming import QUICK_TICK
from support.synccheck import start_daemon, stop_gracefully, wait_for_log

from recordsync.service.daemon.requested_work import POLL
from recordsync.sim import SimConfig, Simulator
from recordsync.sim.config import FaultRates
from recordsync.warehouse import RequestKind, RequestState, Warehouse

pytestmark = pytest.mark.slow

RESTART_GAP = 3.0  # seconds between D1's stop and D2's start
# The daemons' and the commands' tick and lease (``fleettiming``); a command alone for a lease
# and a tick takes the lease back, which a restart must stay well within.
TIMING = QUICK_TICK
# A daemon joining holds the merchant within its announce wait and two ticks.
HELD_WITHIN = TIMING.announce_wait + 2 * TIMING.tick
SLOW_PAGE = 1.5  # seconds: a page answered late while a daemon joins a command holding it


def simulator(seed: int, *, slow: bool) -> Simulator:
    """One merchant, 3 000 records; ``slow``: each records request 300 ms late, so that a job
    over the history takes seconds at a holder beside its tail (the budget, 10 requests a
    second, is shared with the tail's polls, which a handed-over job does not stretch yet)."""
    return Simulator(
        SimConfig(
            merchant_id="hand",
            secret="handover-secret-0123456789abcdefghijklmnopq",
            seed=seed,
            history_days=1.0,
            rounds_per_day=3000,
            live_rate=3.0,
            record_requests=10,
            faults=FaultRates(records_latency_ms=300.0 if slow else 0.0),
        ).with_merchants(1)
    )


def command(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``recordsync --config CONFIG ARGS`` in a process of its own, its output in ``log``."""
    return start_daemon({}, log, "--config", str(config), *args)


def span(sim: Simulator) -> tuple[str, ...]:
    end = sim.now().replace(microsecond=0)
    start = end - timedelta(days=1, hours=1)
    return ("--from", start.isoformat(), "--to", end.isoformat())


def at(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def started(sim: Simulator, warehouse_url: str, tmp_path: Path) -> tuple[Path, str, Warehouse]:
    """``sim`` serving its one merchant and a migrated warehouse: the config, the merchant and
    the warehouse."""
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *TIMING.toml_lines())
    (merchant_id,) = sim.merchant_ids
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    return config, merchant_id, warehouse


def first(log: Path, name: str, **fields: object) -> dict[str, object]:
    found = [
        e
        for e in events(log)
        if e.get("event") == name and all(e.get(k) == v for k, v in fields.items())
    ]
    assert found, (name, [e.get("event") for e in events(log)][-30:])
    return found[0]


@pytest.mark.parametrize(
    ("warehouse_url", "kind"),
    [
        pytest.param(
            "postgres", RequestKind.RESYNC, id="postgres-resync", marks=pytest.mark.postgres
        ),
        pytest.param("sqlite", RequestKind.BACKFILL, id="sqlite-backfill"),
    ],
    indirect=["warehouse_url"],
)
def test_a_job_handed_to_a_daemon_survives_its_restart_and_the_new_daemon_holds_at_once(
    warehouse_url: str, kind: RequestKind, tmp_path: Path
):
    sim = simulator(71, slow=True)
    config, merchant_id, warehouse = started(sim, warehouse_url, tmp_path)
    d1 = Replica(config, tmp_path / "d1.log")
    d2: Replica | None = None
    job: subprocess.Popen[bytes] | None = None
    try:
        assert_truth(warehouse, sim, [merchant_id])
        sim.start_live()
        args = ("merchant", "resync", merchant_id) if kind is RequestKind.RESYNC else ("backfill",)
        job_log = tmp_path / "job.log"
        job = command(config, job_log, *args, *span(sim))
        wait_for_log(d1.log, f'"requested_{kind.value}_started"', timeout=60)
        time.sleep(1.0)  # a page or two read at D1
        code, _took = stop_gracefully(d1.process)
        assert code == 0
        time.sleep(RESTART_GAP)
        assert job.poll() is None, job_log.read_text()[-2000:]  # still following, not done
        d2 = Replica(config, tmp_path / "d2.log")
        job.wait(timeout=120)
        assert job.returncode == 0, job_log.read_text()[-3000:]
        ended = time.time()
        names = {str(e.get("event")) for e in events(job_log)}
        assert f"{kind.value}_taken_back" not in names  # not taken at the free moment
        assert f"{kind.value}_finished" in names

        joined = at(first(d2.log, "replica_joined"))
        synced = at(first(d2.log, "merchant_sync_started", merchant_id=merchant_id))
        held_after = synced - joined
        print(f"D2 held the merchant {held_after:.2f} s after joining")  # noqa: T201 - a figure
        assert held_after <= HELD_WITHIN
        assert synced < ended  # its tail ran while the job went on
        d2_names = [str(e.get("event")) for e in events(d2.log)]
        assert f"requested_{kind.value}_finished" in d2_names  # the rest ran at D2
        assert "lease_waiting" not in d2_names
        sim.stop_live()
        assert_truth(warehouse, sim, [merchant_id])
    finally:
        stop_all((job, d1.process, None if d2 is None else d2.process), sim, warehouse)
    assert sim.stats().rate_limit_violations == 0


def stop_all(
    processes: Iterable[subprocess.Popen[bytes] | None], sim: Simulator, warehouse: Warehouse
) -> None:
    """The end of a test: every process still running stopped as an operator would."""
    for process in processes:
        if process is not None and process.poll() is None:
            stop_gracefully(process)
    sim.stop()
    warehouse.close()


def synced_then_stopped(
    sim: Simulator, warehouse_url: str, tmp_path: Path
) -> tuple[Path, str, Warehouse]:
    """``sim`` started, its merchant synced to the truth by a daemon that then stops, so that
    no replica is live: the config, the merchant and the warehouse."""
    config, merchant_id, warehouse = started(sim, warehouse_url, tmp_path)
    daemon = Replica(config, tmp_path / "first.log")
    try:
        assert_truth(warehouse, sim, [merchant_id])
    finally:
        stop_gracefully(daemon.process)
    return config, merchant_id, warehouse


class SilentHolder:
    """A live daemon as the fleet sees it (heartbeat, configured with the merchant, its lock
    held) that runs no request: what a command follows while its request is pending."""

    def __init__(self, warehouse: Warehouse, merchant_id: str) -> None:
        self._session = warehouse.fleet_session("silent-holder")
        self._merchant_id = merchant_id
        self._stop = threading.Event()
        self._session.heartbeat(0, merchants=[merchant_id])
        assert self._session.try_hold(merchant_id) is not None
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(TIMING.tick):  # as a daemon beats
            self._session.heartbeat(1, merchants=[self._merchant_id])

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._session.leave()
        self._session.close()


# Ctrl-C at a terminal (SIGINT) on two backends; cron's `timeout` or a stopped Job (SIGTERM)
# on the third: both signals end a following command the same way, 128 + the signal.
INTERRUPTIONS: Final = [
    pytest.param(backend.values[0], signal.SIGINT, id=f"{backend.id}-SIGINT", marks=backend.marks)
    for backend in BACKEND_PARAMS[:2]
] + [
    pytest.param(backend.values[0], signal.SIGTERM, id=f"{backend.id}-SIGTERM", marks=backend.marks)
    for backend in BACKEND_PARAMS[2:]
]


@pytest.mark.parametrize(("warehouse_url", "signum"), INTERRUPTIONS, indirect=["warehouse_url"])
def test_ctrl_c_of_each_following_command_cancels_its_request_and_a_backfill_carries_on(
    warehouse_url: str, signum: signal.Signals, tmp_path: Path
):
    """reset, verify and resync interrupted while they follow: exit 128 + the signal, the last
    line says the request was cancelled, and once a daemon holds the merchant none of them
    runs (the reset above all: no re-anchor).  A backfill interrupted says it carries on, and
    the daemon finishes it."""
    sim = simulator(72, slow=False)
    config, merchant_id, warehouse = synced_then_stopped(sim, warehouse_url, tmp_path)
    before = warehouse.state.load_state(merchant_id)
    assert before is not None
    holder = SilentHolder(warehouse, merchant_id)
    daemon = None
    try:
        _interrupt_each_while_it_follows(config, merchant_id, span(sim), tmp_path, signum)
        asked = {request.kind: request.state for request in _all_requests(warehouse, merchant_id)}
        assert asked == {
            RequestKind.RESET: RequestState.CANCELLED,
            RequestKind.VERIFY: RequestState.CANCELLED,
            RequestKind.RESYNC: RequestState.CANCELLED,
            RequestKind.BACKFILL: RequestState.PENDING,
        }
    finally:
        holder.close()
    daemon = Replica(config, tmp_path / "second.log")
    try:
        wait_for_log(daemon.log, '"requested_backfill_finished"', timeout=60)
        time.sleep(2 * POLL)  # its watcher looked again: nothing else to run
        after = warehouse.state.load_state(merchant_id)
        assert after is not None
        assert after.rebuilds == before.rebuilds  # no reset ran for nobody
        ran = {str(e.get("event")) for e in events(daemon.log)}
        assert not ran & {"requested_reset_started", "requested_verify_started"}
        assert "requested_resync_started" not in ran
        assert merchant_id in holders(warehouse)
    finally:
        stop_gracefully(daemon.process)
        sim.stop()
        warehouse.close()


def _all_requests(warehouse: Warehouse, merchant_id: str):
    found = []
    request_id = 1
    while (request := warehouse.requests.get(request_id)) is not None:
        if request.merchant_id == merchant_id:
            found.append(request)
        request_id += 1
    return found


def _interrupt_each_while_it_follows(
    config: Path, merchant_id: str, window: tuple[str, ...], tmp_path: Path, signum: int
) -> None:
    """Start reset, verify, resync and backfill, each in a process; signal each once it has
    handed its work over: exit 128 + the signal, one last line saying what became of its
    request."""
    runs = {
        "reset": ("merchant", "reset", merchant_id, "--yes"),
        "verify": ("verify", *window),
        "resync": ("merchant", "resync", merchant_id, *window),
        "backfill": ("backfill", *window),
    }
    logs = {name: tmp_path / f"{name}.log" for name in runs}
    processes = {name: command(config, logs[name], *args) for name, args in runs.items()}
    for name in runs:
        wait_for_log(logs[name], f'"{name}_handed_over"', timeout=60)
    for process in processes.values():
        process.send_signal(signum)
    name_of_signal = signal.Signals(signum).name
    for name, process in processes.items():
        assert process.wait(timeout=30) == 128 + signum, logs[name].read_text()[-2000:]
        last = logs[name].read_text().strip().splitlines()[-1]
        assert last.startswith(f"recordsync: interrupted by {name_of_signal}: "), last
        assert "Traceback" not in logs[name].read_text()
        if name == "backfill":
            assert "carries on with the job" in last, last
        else:
            assert "cancelled before any holder started it: it never runs" in last, last


def test_a_job_a_command_holds_is_handed_back_to_a_daemon_that_starts_within_two_ticks(
    warehouse_url: str, tmp_path: Path
):
    """The other side of the hand-over: a backfill held here (no daemon ran), then a daemon
    configured with the merchant starts.  The command stops, the page in hand committed, and
    hands the rest back (``backfill_handed_back``); the daemon holds the merchant within two
    ticks of joining, its tail reads the changes while the rest of the job runs beside it, and
    the job ends done at the daemon."""
    sim = simulator(73, slow=False)
    config, merchant_id, warehouse = synced_then_stopped(sim, warehouse_url, tmp_path)
    daemon: Replica | None = None
    job: subprocess.Popen[bytes] | None = None
    try:
        # Pages answered late while the command holds and the daemon starts: the job spans it.
        sim.set_faults(FaultRates(records_latency_ms=SLOW_PAGE * 1000), merchant_id=merchant_id)
        job_log = tmp_path / "job.log"
        pages = sim.stats(merchant_id).count("records")
        job = command(config, job_log, "backfill", *span(sim))
        _wait_reading_here(sim, warehouse, job, job_log, pages)
        sim.start_live()
        before = warehouse.state.load_state(merchant_id)
        assert before is not None
        daemon = Replica(config, tmp_path / "d1.log")
        wait_for_log(job_log, '"backfill_handed_back"', timeout=30)
        sim.set_faults(FaultRates(records_latency_ms=300.0), merchant_id=merchant_id)
        tailed = _tailed_while_it_runs(warehouse, merchant_id, job, since=before.last_sequence)
        assert job.returncode == 0, job_log.read_text()[-3000:]
        ended = time.time()
        assert tailed, "no change was read while the job ran at the daemon"
        names = [str(e.get("event")) for e in events(job_log)]
        assert names.index("backfill_handed_back") < names.index("backfill_finished")

        joined = at(first(daemon.log, "replica_joined"))
        synced = at(first(daemon.log, "merchant_sync_started", merchant_id=merchant_id))
        held_after = synced - joined
        print(f"the daemon held the merchant {held_after:.2f} s after joining")  # noqa: T201
        # Two ticks of joining, after the page in hand the command commits before it lets go.
        assert held_after <= HELD_WITHIN + SLOW_PAGE
        assert synced < ended
        assert "requested_backfill_finished" in [str(e.get("event")) for e in events(daemon.log)]
        sim.stop_live()
        sim.set_faults(FaultRates(), merchant_id=merchant_id)
        assert_truth(warehouse, sim, [merchant_id])
    finally:
        stop_all((job, None if daemon is None else daemon.process), sim, warehouse)
    assert sim.stats().rate_limit_violations == 0


def _wait_reading_here(
    sim: Simulator,
    warehouse: Warehouse,
    job: subprocess.Popen[bytes],
    log: Path,
    pages: int,
) -> None:
    """Until the command holds the merchant itself (its session is ``backfill-...``) and has
    asked the platform for pages under that lease."""
    (merchant_id,) = sim.merchant_ids
    deadline = time.monotonic() + 30
    while not str(holders(warehouse).get(merchant_id, "")).startswith("backfill-"):
        assert time.monotonic() < deadline, holders(warehouse)
        assert job.poll() is None, log.read_text()[-2000:]
        time.sleep(0.1)
    while sim.stats(merchant_id).count("records") < pages + 2:
        assert time.monotonic() < deadline, "the backfill read nothing here"
        time.sleep(0.1)


def _tailed_while_it_runs(
    warehouse: Warehouse, merchant_id: str, job: subprocess.Popen[bytes], *, since: str | None
) -> bool:
    """Whether the merchant's tail moved past ``since`` (its last sequence) before ``job``
    ended; waits for the end."""
    tailed = False
    while job.poll() is None:
        now = warehouse.state.load_state(merchant_id)
        tailed = tailed or (now is not None and now.last_sequence != since)
        time.sleep(0.2)
    return tailed

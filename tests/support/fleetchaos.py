"""Pauses and cuts under a fleet of real replicas: the test's and the benchmark's
driver (``tests/e2e/test_fleet_chaos.py``, ``bench/chaos.py``).

Each replica is a real ``recordsync run`` process whose database connections go through a
fault proxy of its own (``netfaults``), and whose platform requests go through another, which
counts them.  An event picks a replica that holds merchants and either pauses it (SIGSTOP,
SIGCONT after ``pause_seconds``) or cuts it off from the database (a blackhole for
``cut_seconds``); an event "inside a write" first waits until the replica's next fenced write
has sent its fence check (the proxy's ``freeze_when``), then pauses or cuts it right there.
For every event the driver measures, and the caller judges:

- the takeover: from the event until every merchant the victim held is held by another;
- two holders at once: every replica's ``/metrics`` sampled (``recordsync_lease_held``, the
  paused one excepted, which cannot answer), never two at 1 for one merchant;
- requests of the victim for merchants it lost: its platform proxy must forward nothing from
  the lease's end (the event + the lease of its ``timing``) until it holds a merchant again.
  A pause is the one exception no process can rule out: a thread stopped between its last
  lease check and its socket write (a few bytecodes, ``platform.wire``) sends that request when
  the process resumes.  Such a request was signed before the pause (its X-Timestamp, whole
  seconds, is at most the pause's second), every other one after the process resumed,
  seconds later; the first are counted apart (``in_flight_at_pause``), the second must be none;
- its survival and its return: the victim is alive afterwards, and the shares even out again.

At the end every merchant must equal the simulator's truth with no rate-limit violation.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from recordsync.sim import Simulator
from recordsync.warehouse import Warehouse
from support.fleetcheck import assert_truth, events, holders
from support.fleettiming import DEFAULT, FleetTiming
from support.netfaults import FaultProxy
from support.synccheck import start_daemon, stop_gracefully

# Inside a write: the fence check's shared row lock, as each server's SQL spells it
# (leases.check_epoch), or on PostgreSQL, where psycopg sends a statement it has run five
# times on a connection by name, the COPY of the page's rows in the same transaction (never
# prepared; it comes before the check, page_commits).
INSIDE_A_WRITE: Final = {
    "postgresql": (b"FOR SHARE", b"COPY "),
    "mysql": (b"LOCK IN SHARE MODE",),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class CountingProxy(FaultProxy):
    """A fault proxy that also notes when each client chunk went through (a request) and the
    X-Timestamp it was signed with (0 when the chunk carries none)."""

    def __init__(self, target: tuple[str, int]) -> None:
        super().__init__(target)
        self.sent_at: list[tuple[float, int]] = []
        self._count_lock = threading.Lock()

    def _maybe_freeze(self, data: bytes) -> None:
        found = _SIGNED_AT.search(data)
        with self._count_lock:
            self.sent_at.append((time.monotonic(), int(found[1]) if found else 0))
        super()._maybe_freeze(data)

    def sent_between(self, start: float, end: float, *, signed_after: int = -1) -> int:
        """Requests that went through in [start, end) signed after the second ``signed_after``."""
        with self._count_lock:
            return sum(
                1 for at, signed in self.sent_at if start <= at < end and signed > signed_after
            )


_LEASE_EVENTS: Final = frozenset(
    {
        "merchant_held",
        "merchant_released",
        "lease_acquired",
        "merchant_lost",
        "merchant_handed_over",
    }
)
_SIGNED_AT: Final = re.compile(rb"\r\nx-timestamp: *([0-9]{1,12})\r\n", re.IGNORECASE)


@dataclass
class Replica:
    """One ``recordsync run`` behind its two proxies."""

    name: str
    folder: Path
    database: FaultProxy
    platform: CountingProxy
    port: int
    process: object = None

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}.log"

    def start(self, sim: Simulator, url: str, timing: FleetTiming) -> None:
        config = self.folder / f"{self.name}.toml"
        through = make_url(url).set(host="127.0.0.1", port=self.database.port)
        history_from = sim.now() - timedelta(days=sim.config.history_days + 1)
        lines = [
            f'base_url = "http://127.0.0.1:{self.platform.port}"',
            f'database_url = "{through.render_as_string(hide_password=False)}"',
            f'history_from = "{history_from.isoformat()}"',
            f"http_port = {self.port}",
            "page_size = 100",
            "poll_interval = 0.2",
            "snapshot_concurrency = 2",
            "drift_check_interval = 0",
            "http_timeout = 5",
            'log_format = "json"',
            *timing.toml_lines(),
        ]
        for profile in sim.config.profiles:
            lines += ["[[merchants]]", f'merchant_id = "{profile.merchant_id}"']
            lines += [f'secret = "{profile.secret}"']
        config.write_text("\n".join(lines) + "\n")
        self.process = start_daemon({}, self.log, "--config", str(config), "run")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None  # type: ignore[attr-defined]

    def lease_held(self) -> set[str] | None:
        """The merchants its /metrics say it holds; None when it does not answer."""
        try:
            body = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=1.0).text
        except httpx.HTTPError:
            return None
        return {
            sample.labels["merchant_id"]
            for family in text_string_to_metric_families(body)
            for sample in family.samples
            if sample.name == "recordsync_lease_held" and sample.value == 1
        }

    def acquired_since(self, moment: datetime) -> datetime | None:
        """When it first took a merchant after ``moment`` (its log), or None.

        ``merchant_held`` is logged when the lock is taken; ``lease_acquired`` only after the
        merchant's sync started, whose first requests may go out before that line: counted
        from it, they looked like requests sent after the lease was lost (a fresh-clone run
        counted one)."""
        for entry in events(self.log):
            if entry["event"] == "merchant_held":
                at = datetime.fromisoformat(str(entry["timestamp"]))
                if at > moment:
                    return at
        return None


@dataclass
class Event:
    kind: str  # "pause" or "cut"
    inside_write: bool
    victim: str
    merchants: list[str]
    takeover: float | None = None
    sent_after_lease: int = 0
    in_flight_at_pause: int = 0  # signed before a pause, sent after the lease (module docstring)
    longest_look: float = 0.0  # the longest time between two looks at the holders
    # Not taken over in time: what every replica logged of its leases meanwhile, to say why.
    timeline: list[str] = field(default_factory=list)
    double_holds: list[str] = field(default_factory=list)
    survived: bool = True
    rebalanced: float | None = None


@dataclass
class Chaos:
    """The driver: ``run(events)`` then judge ``self.events``."""

    sim: Simulator
    url: str
    folder: Path
    replicas: int = 3
    pause_seconds: float = 20.0
    cut_seconds: float = 25.0
    timing: FleetTiming = DEFAULT  # the replicas' tick and lease
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    events: list[Event] = field(default_factory=list)
    members: list[Replica] = field(default_factory=list)
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        self.observer = Warehouse.connect(self.url)
        self.dialect = self.observer.engine.dialect.name
        self.merchants = list(self.sim.merchant_ids)

    # -- life -------------------------------------------------------------------------------

    def start(self) -> None:
        self.observer.migrate()
        parsed = make_url(self.url)
        host, port = self.sim.address
        for number in range(self.replicas):
            replica = Replica(
                f"r{number}",
                self.folder,
                FaultProxy((parsed.host or "127.0.0.1", parsed.port or 0)),
                CountingProxy((host, port)),
                free_port(),
            )
            replica.start(self.sim, self.url, self.timing)
            self.members.append(replica)
        self.wait_balanced(90.0)

    def stop(self) -> None:
        try:
            for replica in self.members:
                replica.database.heal()
                if replica.alive:
                    replica.process.send_signal(signal.SIGCONT)  # type: ignore[attr-defined]
                    stop_gracefully(replica.process)  # type: ignore[arg-type]
        finally:
            for replica in self.members:
                replica.database.close()
                replica.platform.close()
            self.observer.close()

    def finish(self) -> None:
        """Every merchant equal to the truth, no rate-limit violation, nobody crashed."""
        self.sim.stop_live()
        assert_truth(self.observer, self.sim, self.merchants)
        for merchant in self.merchants:
            assert self.sim.stats(merchant).rate_limit_violations == 0, merchant

    # -- the events -------------------------------------------------------------------------

    def run(self, kinds: list[tuple[str, bool]]) -> None:
        """One event per (kind, inside a write), in order."""
        for kind, inside in kinds:
            self.events.append(self._event(kind, inside))

    def _event(self, kind: str, inside: bool) -> Event:
        held = holders(self.observer)
        candidates = [
            replica
            for replica in self.members
            if any(h == self._id(replica) for h in held.values())
        ]
        victim = self.rng.choice(candidates)
        mine = sorted(m for m, h in held.items() if h == self._id(victim))
        event = Event(kind, inside, victim.name, mine)
        if inside:
            victim.database.freeze_when(*INSIDE_A_WRITE[self.dialect])
            deadline = time.monotonic() + 20
            while victim.database.frozen_at is None:
                assert time.monotonic() < deadline, f"{victim.name} sent no fenced write"
                time.sleep(0.01)
            victim.database.frozen_at = None
            if kind == "pause":  # paused right after its fence check reached the server
                victim.process.send_signal(signal.SIGSTOP)  # type: ignore[attr-defined]
                victim.database.heal()
        elif kind == "pause":
            victim.process.send_signal(signal.SIGSTOP)  # type: ignore[attr-defined]
        else:
            victim.database.blackhole()
        began, began_wall = time.monotonic(), datetime.now(UTC)
        length = self.pause_seconds if kind == "pause" else self.cut_seconds
        # The holders are looked at every quarter second on their own: the double-hold
        # samples scrape every replica twice, with a second's timeout each, and a scrape slow
        # to answer under load made the takeover's measure seconds coarser.
        sampling = threading.Event()
        sampler = threading.Thread(
            target=self._sample_until,
            args=(sampling, event, victim if kind == "pause" else None),
            daemon=True,
        )
        sampler.start()
        looked = began
        # One observing session for the event: a new one each look (a connection of its own
        # to the server) made every look take up to 0.75 s under load.
        observing = self.observer.fleet_session("test-observer")
        try:
            while time.monotonic() - began < length:
                now_held = observing.holders()
                if event.takeover is None and all(
                    now_held.get(m) not in {None, self._id(victim)} for m in mine
                ):
                    event.takeover = time.monotonic() - began
                time.sleep(0.25)
                event.longest_look = max(event.longest_look, time.monotonic() - looked)
                looked = time.monotonic()
        finally:
            sampling.set()
            sampler.join()
            observing.close()
        ended = time.monotonic()
        if kind == "pause":
            victim.process.send_signal(signal.SIGCONT)  # type: ignore[attr-defined]
        else:
            victim.database.heal()
        self._after(event, victim, began, began_wall, ended)
        if event.takeover is None:
            event.timeline = self._timeline(began_wall, began_wall + timedelta(seconds=length))
        self.log(f"  {kind}{' inside a write' if inside else ''} of {victim.name}: {event}")
        return event

    def _after(
        self, event: Event, victim: Replica, began: float, began_wall: datetime, ended: float
    ) -> None:
        settled = self.wait_balanced(60.0)
        event.rebalanced = settled
        event.survived = victim.alive
        back = victim.acquired_since(began_wall)
        back_mono = ended + 60.0
        if back is not None:
            back_mono = time.monotonic() - (datetime.now(UTC) - back).total_seconds()
        after_lease = began + self.timing.lease
        sent = victim.platform.sent_between(after_lease, back_mono)
        if event.kind == "pause":
            paused_second = int(began_wall.timestamp())
            event.sent_after_lease = victim.platform.sent_between(
                after_lease, back_mono, signed_after=paused_second
            )
            event.in_flight_at_pause = sent - event.sent_after_lease
        else:
            event.sent_after_lease = sent

    def _timeline(self, start: datetime, end: datetime) -> list[str]:
        """Every replica's lease events and warnings in [start - 1 s, end], in time order, as
        "+seconds replica event merchant error" from ``start``."""
        lines: list[tuple[float, str]] = []
        for replica in self.members:
            for entry in events(replica.log):
                at = datetime.fromisoformat(str(entry["timestamp"]))
                offset = (at - start).total_seconds()
                name = str(entry["event"])
                wanted = name in _LEASE_EVENTS or entry.get("level") in {"warning", "error"}
                if wanted and offset >= -1.0 and at <= end and "skipped" not in name:
                    error = str(entry.get("error", ""))[:120]
                    lines.append(
                        (
                            offset,
                            f"+{offset:.2f} {replica.name} {name} "
                            f"{entry.get('merchant_id', '')} {error}".rstrip(),
                        )
                    )
        return [line for _, line in sorted(lines)]

    def _sample_until(self, done: threading.Event, event: Event, paused: Replica | None) -> None:
        while not done.is_set():
            self._sample_double_holds(event, paused=paused)
            done.wait(0.25)

    def _sample_double_holds(self, event: Event, *, paused: Replica | None) -> None:
        """Two replicas that claim one merchant, in two passes over their /metrics, the second
        in the reverse order: a clean hand-over (released, then taken tens of milliseconds
        later) falls between two scrapes of one pass now and then, the giver read before it
        let go and the taker after it took; the reverse pass reads the taker first and the
        giver after, so only claims that overlap for real are counted."""
        asked = [replica for replica in self.members if replica is not paused]
        passes = [self._claims(asked), self._claims(asked[::-1])]
        both = {
            merchant: sorted(names)
            for merchant, names in passes[0].items()
            if len(names) > 1 and set(names) <= set(passes[1].get(merchant, []))
        }
        event.double_holds += [f"{m}: {names}" for m, names in both.items()]

    @staticmethod
    def _claims(replicas: list[Replica]) -> dict[str, list[str]]:
        seen: dict[str, list[str]] = {}
        for replica in replicas:
            for merchant in replica.lease_held() or set():
                seen.setdefault(merchant, []).append(replica.name)
        return seen

    def restart_server(
        self, stop: Callable[[], None], start: Callable[[], None], down: float
    ) -> tuple[float, list[str]]:
        """Stop the database server for ``down`` seconds under the fleet, sampling every
        replica's /metrics all along: (seconds from the server's start until every merchant is
        held again, the samples that showed a merchant held twice)."""
        doubles: list[str] = []
        probe = Event("restart", inside_write=False, victim="", merchants=[])
        stop()
        try:
            stopped = time.monotonic()
            while time.monotonic() - stopped < down:
                self._sample_double_holds(probe, paused=None)
                time.sleep(0.25)
        finally:
            start()
        started = time.monotonic()
        while True:
            self._sample_double_holds(probe, paused=None)
            with contextlib.suppress(Exception):  # the server is still coming back
                if set(holders(self.observer)) >= set(self.merchants):
                    break
            assert time.monotonic() - started < 120, "not every merchant held again"
            time.sleep(0.25)
        held_again = time.monotonic() - started
        for _ in range(20):  # and a few seconds more, while the shares even out
            self._sample_double_holds(probe, paused=None)
            time.sleep(0.25)
        doubles += probe.double_holds
        return held_again, doubles

    # -- facts --------------------------------------------------------------------------------

    def _id(self, replica: Replica) -> str | None:
        for entry in events(replica.log):
            if "replica_id" in entry:
                return str(entry["replica_id"])
        return None

    def wait_balanced(self, timeout: float) -> float:
        """Seconds until every merchant is held and the shares are within one."""
        started = time.monotonic()
        live = len(self.members)
        low, high = len(self.merchants) // live, -(-len(self.merchants) // live)
        while True:
            held = holders(self.observer)
            counts = sorted(list(held.values()).count(r) for r in set(held.values()))
            counts = [0] * (live - len(counts)) + counts
            if set(held) >= set(self.merchants) and low <= counts[0] <= counts[-1] <= high:
                return time.monotonic() - started
            assert time.monotonic() - started < timeout, f"not balanced: {counts} {held}"
            time.sleep(0.25)


def summary(events_: list[Event]) -> dict[str, object]:
    takeovers = sorted(e.takeover for e in events_ if e.takeover is not None)
    return {
        "events": len(events_),
        "inside a write": sum(e.inside_write for e in events_),
        "takeover min/median/max": (
            (takeovers[0], takeovers[len(takeovers) // 2], takeovers[-1]) if takeovers else None
        ),
        "not taken over": sum(e.takeover is None for e in events_),
        "double holds seen": sum(len(e.double_holds) for e in events_),
        "requests after the lease": sum(e.sent_after_lease for e in events_),
        "in flight at a pause": sum(e.in_flight_at_pause for e in events_),
        "crashed": sum(not e.survived for e in events_),
        "rebalanced max": max((e.rebalanced or 0.0) for e in events_) if events_ else None,
        "raw": [json.loads(json.dumps(e.__dict__, default=str)) for e in events_],
    }

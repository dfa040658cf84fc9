"""What every benchmark shares: sizes, the simulator in its own process, throwaway databases,
peak memory of a child process, and one way of printing figures against their targets.

The benchmarks are scripts (``.venv/bin/python bench/<name>.py --size tiny|full``), not tests:
they print what they measure and never fail on a figure (a tiny run proves only that the
script still works; ``--check`` turns a missed target into exit code 1 for a full run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Self

from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

ROOT: Final = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: import the working tree
    sys.path.insert(0, str(ROOT))

from recordsync.core.secret import Secret, SecretSource  # noqa: E402
from recordsync.core.settings import MerchantSettings, Settings  # noqa: E402
from recordsync.platform.budget import RateBudget  # noqa: E402 - after the path fix above
from recordsync.platform.client import PlatformClient  # noqa: E402
from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET, Simulator  # noqa: E402

SIZES: Final = ("tiny", "full")
BACKENDS: Final = ("sqlite", "postgres", "mariadb")
# The same servers and variables as the test suite (tests/support/dbfixtures.py).
SERVER_URLS: Final = {
    "postgres": (
        "RECORDSYNC_TEST_POSTGRES_URL",
        "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    ),
    "mariadb": ("RECORDSYNC_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}
LIFTED_RATE: Final = 100_000  # record_requests per second when the rate limit is "lifted"


def arguments(description: str, extra: Sequence[tuple[str, dict[str, Any]]] = ()) -> Any:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", choices=SIZES, default="full", help="tiny: seconds, for CI")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    for name, options in extra:
        parser.add_argument(name, **options)
    return parser.parse_args()


# -- figures -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Figure:
    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None  # None: a figure without a target (context for the others)

    def line(self) -> str:
        verdict = "" if self.met is None else ("  met" if self.met else "  NOT MET")
        target = f"  (target {self.target})" if self.target else ""
        return f"  {self.name:<52} {_number(self.value):>12} {self.unit:<8}{target}{verdict}"


def _number(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


@dataclass
class Report:
    title: str
    size: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(
        self,
        name: str,
        value: float,
        unit: str,
        *,
        target: str = "",
        met: bool | None = None,
    ) -> Figure:
        figure = Figure(name, value, unit, target, met)
        self.figures.append(figure)
        print(figure.line(), flush=True)
        return figure

    def note(self, text_: str) -> None:
        self.notes.append(text_)
        print(f"  note: {text_}", flush=True)

    def header(self) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        print(
            f"== {self.title} (size {self.size}, {os.cpu_count()} cores, load {load}, {stamp})",
            flush=True,
        )

    def finish(self, *, check: bool) -> int:
        missed = [figure.name for figure in self.figures if figure.met is False]
        if self.size != "full":
            print("  (tiny size: targets are printed for the record, not judged)", flush=True)
            return 0
        if missed:
            print(f"  missed: {', '.join(missed)}", flush=True)
        return 1 if check and missed else 0


# -- the simulator in its own process --------------------------------------------------------


@dataclass
class SimProcess:
    """``python -m recordsync.sim`` on a free port: its own interpreter, so its own GIL."""

    process: subprocess.Popen[str]
    base_url: str
    records: int
    # (merchant_id, secret) of each merchant when it serves several (``merchants=N``)
    merchants: tuple[tuple[str, str], ...] = ()

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid)


@contextlib.contextmanager
def sim_process(
    *,
    history_days: float,
    rounds_per_day: int,
    record_requests: int = LIFTED_RATE,
    live_rate: float = 0.0,
    merchants: int = 1,
    extra: Sequence[str] = (),
    launcher: Sequence[str] = ("-m", "recordsync.sim"),
    commands: bool = False,
) -> Iterator[SimProcess]:
    """The simulator; with ``merchants`` > 1 it serves that many derived merchants (their ids
    and secrets as it announces them, ``records`` summed over all).

    ``launcher``: what the interpreter runs, another entry point that takes the simulator's
    options and announces as it does; ``commands``: its standard input is a pipe
    (``SimProcess.process.stdin``), for such an entry point that takes commands there."""
    command = [
        sys.executable,
        *launcher,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--history-days",
        str(history_days),
        "--rounds-per-day",
        str(rounds_per_day),
        "--record-requests",
        str(record_requests),
        "--live-rate",
        str(live_rate),
        *(("--merchants", str(merchants)) if merchants > 1 else ()),
        *extra,
    ]
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        command,
        stdin=subprocess.PIPE if commands else None,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        announced: list[dict[str, str]] = []  # one line per merchant, "records=" in each
        base_url = ""
        assert process.stdout is not None
        while len(announced) < merchants:
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"the simulator exited with {process.wait()}")
            facts = dict(part.partition("=")[::2] for part in line.split())
            base_url = facts.get("base_url", base_url)
            if "records" in facts:
                announced.append(facts)
        records = sum(int(facts["records"]) for facts in announced)
        # One merchant's id and secret are the configured ones (its line names neither).
        served = (
            tuple((facts["merchant_id"], facts["secret"]) for facts in announced)
            if merchants > 1
            else ()
        )
        yield SimProcess(process, base_url, records, served)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` free ports, all different."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


# -- a daemon, from this tree or another (``--tree PATH``) -----------------------------------


def tree_root(tree: Path | None) -> Path:
    """Where a daemon of ``tree`` starts (this checkout without one): ``python -m`` puts the
    working directory first on the path."""
    return ROOT if tree is None else tree


def daemon_environment(tree: Path | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A daemon's environment: ``base`` (by default ours without any RECORDSYNC_*); with
    ``tree``, ``PYTHONPATH`` names it, so its ``recordsync`` comes before the one this venv
    installs (the daemon starts in it too: ``tree_root``)."""
    if base is None:
        base = {
            key: value for key, value in os.environ.items() if not key.startswith("RECORDSYNC_")
        }
    env = dict(base)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


PACKAGE_PROBE: Final = (
    "import json, recordsync; print(json.dumps({'package': recordsync.__file__}))"
)


@dataclass(frozen=True, slots=True)
class TreeCode:
    """Which code a daemon of a tree runs: printed with the figures, so a run says what it
    measured."""

    package: Path  # the recordsync package it imports
    commit: str  # the tree's last commit, "%h %s"; "" outside git
    dirty: bool  # uncommitted changes to tracked files
    facts: dict[str, Any]  # whatever else the probe printed


def tree_code(
    tree: Path | None, *, env: Mapping[str, str] | None = None, probe: str = PACKAGE_PROBE
) -> TreeCode:
    """Run ``probe`` (``python -c``) as a daemon of ``tree`` would run, with ``env`` (by
    default ``daemon_environment(tree)``): its last line of output is a JSON object whose
    "package" is ``recordsync.__file__``; that tree's commit with it."""
    where = tree_root(tree)
    answer = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", probe],
        env=daemon_environment(tree) if env is None else dict(env),
        cwd=where,
        capture_output=True,
        text=True,
        check=False,
    )
    if answer.returncode != 0:
        raise RuntimeError(f"the daemon's probe failed in {where}:\n{answer.stderr[-2000:]}")
    facts = json.loads(answer.stdout.strip().splitlines()[-1])
    package = Path(facts.pop("package")).parent
    if not package.is_relative_to(where.resolve()):
        raise RuntimeError(f"python -m recordsync would import {package}, not {where}'s")
    git = ["git", "-C", str(where)]
    commit = subprocess.run(  # noqa: S603 - git, reading only
        [*git, "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(  # noqa: S603 - git, reading only
        [*git, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return TreeCode(package, commit, bool(dirty), facts)


@contextlib.contextmanager
def daemon(
    arguments: Sequence[str],
    log: Path,
    *,
    tree: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m recordsync ARGUMENTS`` of ``tree`` (``tree_root``), with ``env`` (by default
    ``daemon_environment(tree)``), its output appended to ``log``; stopped with SIGTERM (a
    graceful stop)."""
    with log.open("ab") as sink:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "recordsync", *arguments],
            env=daemon_environment(tree) if env is None else dict(env),
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tree_root(tree),
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def check_running(process: subprocess.Popen[bytes], log: Path, *, which: str = "the") -> None:
    """A daemon that exited is an error, its log's tail in it."""
    if process.poll() is not None:
        raise RuntimeError(f"{which} daemon exited {process.returncode}:\n{log_tail(log)}")


def wait_until(
    condition: Callable[[], bool],
    *daemons: tuple[subprocess.Popen[bytes], Path],
    period: float = 0.5,
    timeout: float = 900.0,
) -> float:
    """Poll ``condition`` every ``period`` seconds until true; its wall seconds.  A daemon
    (process, log) that exits, or a wait past ``timeout``, is an error."""
    started = time.monotonic()
    while not condition():
        for process, log in daemons:
            check_running(process, log, which="a" if len(daemons) > 1 else "the")
        if time.monotonic() - started > timeout:
            logs = "\n".join(log_tail(log) for _, log in daemons)
            raise RuntimeError(f"the daemon did not get there in {timeout:.0f} s:\n{logs}")
        time.sleep(period)
    return time.monotonic() - started


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU of a live process (Linux ``/proc``), every thread included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def process_status(pid: int) -> dict[str, str]:
    """A live process's ``/proc/<pid>/status`` fields (Linux): VmRSS, VmHWM, Threads, ..."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {name: value.strip() for name, _, value in (line.partition(":") for line in lines)}


def resident_mb(pid: int, *, peak: bool = False) -> float:
    """A live process's resident memory now (or its peak so far), in MB."""
    return int(process_status(pid)["VmHWM" if peak else "VmRSS"].split()[0]) / 1024


def thread_count(pid: int) -> int:
    return int(process_status(pid)["Threads"])


SERVER_PROCESSES: Final = {"postgres": {"postgres"}, "mariadb": {"mariadbd", "mysqld"}}


def server_cpu_seconds(backend: str) -> float:
    """CPU of ``backend``'s server processes on this machine (none for SQLite), reaped
    children included (a PostgreSQL backend's CPU moves to the postmaster's when it exits):
    the server's share of a run is the difference between two readings."""
    names = SERVER_PROCESSES.get(backend, set())
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, _, rest = stat.read_text().partition(" (")[2].partition(")")
        except OSError:  # the process ended meanwhile
            continue
        if name in names:
            fields = rest.split()
            total += sum(int(value) for value in fields[11:15])
    return total / ticks


class BackendCpu:
    """CPU of the PostgreSQL backends serving one database, from ``/proc/<pid>/stat``.

    The server is shared with whatever else runs on the machine (other benchmarks, test
    suites), so the whole server's CPU (``server_cpu_seconds``) counts their work too; this
    reads only the backends ``pg_stat_activity`` lists for ``database``, sampled every
    ``period`` seconds from a thread of its own (a backend that exits takes its last
    ``period`` with it: the figure errs low by at most that much per connection).
    """

    def __init__(self, url: str, *, period: float = 0.1) -> None:
        self._database = make_url(url).database
        self._admin = create_engine(make_url(server_url("postgres")), poolclass=pool.NullPool)
        self._period = period
        self._base: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, conn: Any, *, base: bool) -> None:
        pids = conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE datname = :db"), {"db": self._database}
        ).scalars()
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            except OSError:  # exited meanwhile
                continue
            ticks = int(fields[11]) + int(fields[12])
            if base:
                self._base[pid] = ticks
            self._last[pid] = max(ticks, self._last.get(pid, 0))

    def __enter__(self) -> Self:
        with self._admin.connect() as conn:
            self._sample(conn, base=True)

        def run() -> None:
            with self._admin.connect() as conn:
                while not self._stop.wait(self._period):
                    self._sample(conn, base=False)
                    conn.rollback()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._admin.connect() as conn:
            self._sample(conn, base=False)
        self._admin.dispose()

    @property
    def seconds(self) -> float:
        ticks = sum(last - self._base.get(pid, 0) for pid, last in self._last.items())
        return ticks / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


# -- databases -------------------------------------------------------------------------------


def server_url(kind: str) -> str:
    variable, default = SERVER_URLS[kind]
    return os.environ.get(variable, default)


@contextlib.contextmanager
def database(kind: str, workdir: Path | None = None) -> Iterator[str]:
    """A new, empty database of ``kind``; its URL; dropped afterwards (as the tests do)."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(dir=workdir) as folder:
            yield f"sqlite:///{Path(folder) / 'warehouse.db'}"
        return
    admin_url = make_url(server_url(kind))
    name = f"rs_bench_{secrets.token_hex(5)}"
    admin = create_engine(admin_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        try:
            yield admin_url.set(database=name).render_as_string(hide_password=False)
        finally:
            force = " WITH (FORCE)" if kind == "postgres" else ""
            with admin.connect() as conn:
                conn.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
    finally:
        admin.dispose()


@contextlib.contextmanager
def mariadb_buffer_pool(mib: int) -> Iterator[None]:
    """MariaDB's InnoDB buffer pool resized to ``mib`` MiB for the block, then put back.

    The server's own setting (MariaDB's 128 MiB default here) is left as it was found: the
    benchmark only shows what a server sized for the table would do.
    """
    admin = create_engine(make_url(server_url("mariadb")), poolclass=pool.NullPool)
    try:
        with admin.connect() as conn:
            before = int(conn.execute(text("SELECT @@innodb_buffer_pool_size")).scalar_one())
            conn.execute(text(f"SET GLOBAL innodb_buffer_pool_size = {int(mib) * 1024 * 1024}"))
        time.sleep(2)  # the resize runs in the background
        try:
            yield
        finally:
            with admin.connect() as conn:
                conn.execute(text(f"SET GLOBAL innodb_buffer_pool_size = {before}"))
    finally:
        admin.dispose()


MARIADB_COUNTERS: Final = ("Innodb_buffer_pool_reads", "Innodb_data_writes")


def mariadb_counters() -> dict[str, int]:
    """InnoDB's pages read from disk and its data writes so far: the server's, so a run's
    share is a difference (and counts whatever else the server did meanwhile)."""
    admin = create_engine(make_url(server_url("mariadb")), poolclass=pool.NullPool)
    try:
        with admin.connect() as conn:
            rows = conn.execute(text("SHOW GLOBAL STATUS LIKE 'Innodb%'")).all()
    finally:
        admin.dispose()
    values = {str(name): value for name, value in rows}
    return {name: int(values[name]) for name in MARIADB_COUNTERS}


def mariadb_table_mb(url: str, tables: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """(data, indexes) in MB per table of ``url``'s database, after ``ANALYZE TABLE``."""
    engine = create_engine(make_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            sizes = {}
            for table in tables:
                conn.exec_driver_sql(f"ANALYZE TABLE {table}").all()
                data, indexes = conn.execute(
                    text(
                        "SELECT data_length, index_length FROM information_schema.tables"
                        " WHERE table_schema = DATABASE() AND table_name = :table"
                    ),
                    {"table": table},
                ).one()
                sizes[table] = (data / 1e6, indexes / 1e6)
    finally:
        engine.dispose()
    return sizes


# -- recordsync's settings and environment for a simulator -----------------------------------


def lifted_client(sim: Simulator) -> PlatformClient:
    """The platform client for an in-process simulator, its budget as lifted as the limit."""
    return PlatformClient(
        base_url=sim.base_url,
        merchant_id=sim.config.merchant_id,
        secret=Secret(sim.config.secret),
        budget=RateBudget(LIFTED_RATE, 1),
    )


def settings_for(
    base_url: str, database_url: str, history_from: datetime, **overrides: Any
) -> Settings:
    merchant = MerchantSettings(
        merchant_id=DEMO_MERCHANT_ID,
        secret=SecretSource.given(Secret(DEMO_SECRET)),
        base_url=base_url,
        history_from=history_from,
    )
    values: dict[str, Any] = {
        "merchants": (merchant,),
        "database_url": database_url,
        "http_port": 0,
        "log_level": "warning",
        "log_format": "console",
    }
    values.update(overrides)
    return Settings(**values)


def environment_for(base_url: str, database_url: str, **overrides: str) -> dict[str, str]:
    """The RECORDSYNC_* environment of a ``python -m recordsync`` child process."""
    return {
        **{key: value for key, value in os.environ.items() if not key.startswith("RECORDSYNC_")},
        "RECORDSYNC_BASE_URL": base_url,
        "RECORDSYNC_MERCHANT_ID": DEMO_MERCHANT_ID,
        "RECORDSYNC_SECRET": DEMO_SECRET,
        "RECORDSYNC_DATABASE_URL": database_url,
        "RECORDSYNC_HTTP_PORT": "0",
        "RECORDSYNC_LOG_LEVEL": "warning",
        "RECORDSYNC_LOG_FORMAT": "json",
        **overrides,
    }


@dataclass(frozen=True, slots=True)
class ChildRun:
    seconds: float
    peak_rss_mb: float
    cpu_seconds: float
    returncode: int
    output: str


def run_child(
    command: Sequence[str], env: dict[str, str], *, timeout: float, cwd: Path = ROOT
) -> ChildRun:
    """Run ``command`` to the end (in ``cwd``); its wall time, peak RSS and CPU from
    ``wait4`` (exact, this child only: no sampling, no other process counted)."""
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as sink:
        process = subprocess.Popen(  # noqa: S603 - the benchmark's own commands
            list(command), env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=cwd
        )
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        sink.seek(0)
        output = sink.read()
    return ChildRun(
        seconds=seconds,
        peak_rss_mb=usage.ru_maxrss / 1024,  # Linux reports KiB
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        returncode=process.returncode,
        output=output,
    )


def iso_ms(value: datetime) -> str:
    """RFC3339 UTC with milliseconds, as the records endpoint takes it."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def backfill_command(start: datetime, end: datetime) -> list[str]:
    """``python -m recordsync backfill`` of ``[start, end)``, as a user would run it."""
    return [
        sys.executable,
        "-m",
        "recordsync",
        "backfill",
        "--from",
        iso_ms(start),
        "--to",
        iso_ms(end),
    ]

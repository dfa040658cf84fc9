"""Every edge a new user meets ends with one plain line and a documented exit code.

Each case runs the real CLI in a subprocess, as a user's shell or a Kubernetes Job would,
and asserts the exact exit code, the line, and that no traceback reached the terminal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from support.leftovers import STARTED

from recordsync.core.times import floor_ms, format_time
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse

MERCHANT = "m-first-contact"
SECRET = "first-contact-secret-0123456789abcdefghijk"  # 43 characters, as the spec's
DEADLINE = 60.0


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret=SECRET,
            seed=29,
            history_days=1.0,
            rounds_per_day=3000,
        )
    )
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def _env(sim_url: str, database_url: str, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RECORDSYNC_") or key == "RECORDSYNC_REQUIRE_SERVICES"
    }
    env.update(
        RECORDSYNC_BASE_URL=sim_url,
        RECORDSYNC_MERCHANT_ID=MERCHANT,
        RECORDSYNC_SECRET=SECRET,
        RECORDSYNC_DATABASE_URL=database_url,
        RECORDSYNC_HTTP_PORT="0",
        RECORDSYNC_LOG_FORMAT="json",
    )
    env.update(extra)
    return env


def _recordsync(
    *args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = DEADLINE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-m", "recordsync", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _start(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen[str]:
    process = subprocess.Popen(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-m", "recordsync", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    STARTED.append(process)
    return process


def _wait_for_line(process: subprocess.Popen[str], needle: str) -> list[str]:
    """Read stdout until a line holds ``needle``; the lines read so far."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    process.kill()
    pytest.fail(f"{needle!r} never came: {lines[-5:]}")


def _no_traceback(*streams: str) -> None:
    for stream in streams:
        assert "Traceback" not in stream, stream[-3000:]


def _last_line(stream: str) -> str:
    lines = [line for line in stream.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _range(sim: Simulator) -> tuple[str, str]:
    end = floor_ms(sim.now())
    return format_time(end - timedelta(days=1, hours=1)), format_time(end)


# --- the platform cannot succeed -----------------------------------------------------------


def test_a_backfill_with_a_wrong_secret_ends_at_once_in_one_line(sim, tmp_path):
    start, end = _range(sim)
    env = _env(sim.base_url, f"sqlite:///{tmp_path / 'w.db'}", RECORDSYNC_SECRET="x" * 43)
    done = _recordsync("backfill", "--from", start, "--to", end, env=env)
    assert done.returncode == 1
    _no_traceback(done.stdout, done.stderr)
    assert done.stderr.splitlines() == [done.stderr.strip()]  # exactly one line
    assert done.stderr.startswith("recordsync: error: authentication failed")
    assert "Job " not in done.stdout + done.stderr  # no scheduler's report of a worker


def test_a_base_url_that_names_no_api_ends_the_backfill_at_once(sim, tmp_path):
    start, end = _range(sim)
    env = _env(f"{sim.base_url}/v1", f"sqlite:///{tmp_path / 'w.db'}")
    done = _recordsync("backfill", "--from", start, "--to", end, env=env)
    assert done.returncode == 1
    _no_traceback(done.stdout, done.stderr)
    assert "Job " not in done.stdout + done.stderr
    assert _last_line(done.stderr).startswith("recordsync: error: ")
    assert "HTTP 404" in _last_line(done.stderr)


@pytest.mark.parametrize(
    ("command", "base_url", "cause"),
    [
        ("backfill", "http://recordsync-platform.invalid", "does not resolve"),
        ("backfill", "http://127.0.0.1:9", "refused the connection"),
        ("backfill", "https://{plain_http}", "TLS failed"),
        # Each case costs the client's own retries (about 15 s): verify once.
        ("verify", "http://recordsync-platform.invalid", "does not resolve"),
    ],
    ids=["name-does-not-resolve", "connection-refused", "tls-fails", "verify"],
)
def test_a_platform_that_cannot_be_reached_ends_a_command_naming_why(
    sim, tmp_path, base_url, cause, command
):
    # TLS to a port that speaks plain HTTP (the simulator's): the handshake fails.
    base_url = base_url.format(plain_http=sim.base_url.removeprefix("http://"))
    env = _env(base_url, f"sqlite:///{tmp_path / 'w.db'}", RECORDSYNC_UNREACHABLE_TIMEOUT="2")
    done = _recordsync(
        command, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z", env=env
    )
    assert done.returncode == (3 if command == "verify" else 1)
    _no_traceback(done.stdout, done.stderr)
    line = _last_line(done.stderr)
    assert line.startswith("recordsync: error: the platform could not be reached for ")
    assert cause in line
    assert "RECORDSYNC_UNREACHABLE_TIMEOUT" in line


# --- interrupted commands ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_an_interrupted_backfill_exits_with_the_signal_and_says_it_resumes(
    sim, tmp_path, signum, code
):
    start, end = _range(sim)
    env = _env(sim.base_url, f"sqlite:///{tmp_path / 'w.db'}", RECORDSYNC_PAGE_SIZE="20")
    process = _start("backfill", "--from", start, "--to", end, env=env)
    _wait_for_line(process, '"snapshot_started"')
    process.send_signal(signum)
    out, err = process.communicate(timeout=DEADLINE)
    assert process.returncode == code
    _no_traceback(out, err)
    assert _last_line(err) == (
        f"recordsync: interrupted by {signal.Signals(signum).name}: the windows finished so "
        "far are kept; run the same command again to resume"
    )


def test_an_interrupted_backfill_handed_to_a_daemon_says_the_daemon_carries_on(sim, tmp_path):
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = Warehouse.connect(url)
    store.migrate()
    holder = store.fleet_session("a-daemon")
    try:
        assert holder.try_hold(MERCHANT) is not None
        start, end = _range(sim)
        process = _start("backfill", "--from", start, "--to", end, env=_env(sim.base_url, url))
        _wait_for_line(process, '"backfill_handed_over"')
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=DEADLINE)
    finally:
        holder.close()
        store.close()
    assert process.returncode == 130
    _no_traceback(out, err)
    assert _last_line(err) == (
        "recordsync: interrupted by SIGINT: the daemon holding the merchant carries on with "
        "the job (request 1; it expires unless a daemon starts it within 60 s of being asked); "
        "nothing is lost by stopping to follow it"
    )


def test_an_interrupted_verify_exits_with_the_signal(sim, tmp_path):
    start, end = _range(sim)
    env = _env(sim.base_url, f"sqlite:///{tmp_path / 'w.db'}", RECORDSYNC_PAGE_SIZE="20")
    process = _start("verify", "--from", start, "--to", end, env=env)
    assert process.stderr is not None
    deadline = time.monotonic() + DEADLINE
    while '"merchant_held"' not in (process.stderr.readline() or ""):
        assert time.monotonic() < deadline
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=DEADLINE)
    assert process.returncode == 130
    _no_traceback(out, err)
    assert _last_line(err) == (
        "recordsync: interrupted by SIGINT: nothing was concluded; run it again"
    )


# --- settings no retry can heal: exit 2 at start, naming them ------------------------------


def test_a_first_start_without_history_from_exits_2_naming_it(tmp_path):
    env = _env("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'w.db'}")
    done = _recordsync("run", env=env)
    assert done.returncode == 2
    _no_traceback(done.stdout, done.stderr)
    assert _last_line(done.stderr).startswith(
        "recordsync: configuration: RECORDSYNC_HISTORY_FROM (or history_from of the merchant "
        "in the config file): required on the first start of 'm-first-contact'"
    )


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this user cannot create files in: permissions stop anyone but root, and
    sysfs refuses new files to root as well."""
    if os.geteuid() == 0:
        return Path("/sys/kernel")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.mark.parametrize("kind", ["missing", "unwritable"])
@pytest.mark.parametrize(
    "command", ["run", "backfill", "verify", "migrate", "status", "report", "demo"]
)
def test_a_sqlite_folder_that_cannot_take_the_file_exits_2_naming_it(tmp_path, kind, command):
    folder = tmp_path / "no" / "such" if kind == "missing" else _unwritable_folder(tmp_path)
    url = f"sqlite:///{folder / 'w.db'}"
    env = _env("http://127.0.0.1:9", url, RECORDSYNC_HISTORY_FROM="2026-01-01T00:00:00Z")
    args = {
        "run": ["run"],
        "backfill": ["backfill", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"],
        "verify": ["verify", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"],
        "migrate": ["migrate"],
        "status": ["status"],
        "report": ["report"],
        "demo": ["demo", "--database", url],
    }[command]
    done = _recordsync(*args, env=env, cwd=tmp_path)
    assert done.returncode == 2
    _no_traceback(done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no usage
    line = _last_line(done.stderr)
    assert line.startswith("recordsync: configuration: ")
    assert f"the folder of the SQLite file, {folder}, " in line
    assert ("does not exist" if kind == "missing" else "cannot be written") in line


def test_a_server_database_without_its_driver_names_the_extra_to_install(tmp_path):
    # An environment without psycopg, as a plain `pip install recordsync` leaves it: the
    # import system is told the module is absent; recordsync itself runs unchanged.
    probe = (
        "import sys; sys.modules['psycopg'] = None; "
        "from recordsync.cli import main; sys.exit(main(['migrate']))"
    )
    env = _env("http://127.0.0.1:9", "postgresql://127.0.0.1/test")
    done = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    _no_traceback(done.stdout, done.stderr)
    assert done.stderr.strip() == (
        "recordsync: configuration: RECORDSYNC_DATABASE_URL: the psycopg driver is not "
        "installed: install recordsync[postgres] (pip install 'recordsync[postgres]', or pip "
        "install -e '.[postgres]' from a checkout)"
    )


# --- a reader that goes away ----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_a_report_into_a_closed_pipe_exits_quietly(tmp_path, fmt):
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = Warehouse.connect(url)
    store.migrate()
    store.close()
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` that has already gone
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
            [sys.executable, "-m", "recordsync", "report", "--format", fmt],
            env=_env("http://127.0.0.1:9", url),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141
    assert done.stderr == ""

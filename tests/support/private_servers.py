"""A database server of the test's own, for the tests that stop and start one.

Stopping a shared server (dbfixtures.py) breaks whatever the other workers are doing on it, so
the restart tests used to run alone while every other test waited: about 5 of the suite's 12
minutes.  A private server takes a few seconds to create and disturbs nobody, so they run beside
the rest.

``private_server`` (imported by tests/conftest.py) is parametrized over ``postgres`` and
``mariadb`` (the test ids, with the same marks as ``SERVER_PARAMS``) and yields a
``PrivateServer``: the URL of an empty database ``test`` on a new server of that kind, and
``stop``/``start`` to restart that server.  It is stopped and its folder removed after the test,
whatever the outcome.  Without the tools to create one the test skips, or fails under
``RECORDSYNC_REQUIRE_SERVICES=1``, as dbfixtures.py does for an absent shared server.

Each server has its own folder (``recordsync-<kind>-*`` in the temporary folder) and a port found
free, so a server that a killed test process left running is never in a later run's way.
"""

from __future__ import annotations

import os
import pwd
import random
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import pytest
from sqlalchemy import create_engine, pool, text

from support.dbfixtures import REQUIRE_SERVICES_ENV, SERVER_PARAMS

_AS_ROOT: Final = os.geteuid() == 0
_POSTGRES_USER: Final = "postgres"  # PostgreSQL refuses to run as root: run it as this user
_TIMEOUT_S: Final = 60
# Debian keeps the servers' programs out of a user's PATH.
_MARIADB_FOLDERS: Final = [Path("/usr/sbin"), Path("/usr/local/sbin")]
_TOOLS: Final = {
    "postgres": ("initdb", "pg_ctl"),
    "mariadb": ("mariadb-install-db", "mariadbd", "mariadb-admin"),
}
_PACKAGES: Final = {"postgres": "postgresql-15", "mariadb": "mariadb-server"}


@dataclass(frozen=True)
class PrivateServer:
    """A running server of the test's own: the URL of its database ``test``, the means to stop
    it and start it again (same folder, port and data), and its folder (its log is there)."""

    kind: str
    url: str
    folder: Path
    stop: Callable[[], None]
    start: Callable[[], None]


class _Server(Protocol):
    url: str
    admin_url: str

    def create(self) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def ensure_stopped(self) -> None: ...


def _postgres_folders() -> list[Path]:
    """Debian's one folder per major version, the newest first."""
    folders = Path("/usr/lib/postgresql").glob("*/bin")
    return sorted(folders, key=lambda folder: _version(folder.parent.name), reverse=True)


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def _find_tools(kind: str) -> tuple[dict[str, Path], list[str]]:
    """The programs that create and run a server of ``kind``, and what is missing."""
    folders = _postgres_folders() if kind == "postgres" else _MARIADB_FOLDERS
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in _TOOLS[kind]:
        on_path = shutil.which(name)
        candidates = [Path(on_path)] if on_path else [folder / name for folder in folders]
        usable = [path for path in candidates if os.access(path, os.X_OK)]
        if usable:
            found[name] = usable[0]
        else:
            missing.append(f"{name} (package {_PACKAGES[kind]})")
    if kind == "postgres" and _AS_ROOT:
        try:
            pwd.getpwnam(_POSTGRES_USER)
        except KeyError:
            missing.append(f"a user {_POSTGRES_USER!r} to run it (it refuses to run as root)")
        if shutil.which("runuser") is None:
            missing.append("runuser (package util-linux)")
    return found, missing


def _tools_or_skip(kind: str) -> dict[str, Path]:
    found, missing = _find_tools(kind)
    if not missing:
        return found
    reason = f"cannot create a private {kind} server: missing {', '.join(missing)}"
    if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
        pytest.fail(f"{reason} [{REQUIRE_SERVICES_ENV}=1]", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    """A port free now, below the kernel's range for the ephemeral ports of outgoing
    connections, so that none of those takes it while the server is down for a restart."""
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    lowest_ephemeral = int(ranges.read_text().split()[0]) if ranges.exists() else 32768
    # Not the module's generator: seeded alike in every worker, they would all pick the same.
    chooser = random.SystemRandom()
    for _ in range(200):
        port = chooser.randrange(10_000, lowest_ephemeral)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port for a private database server")


def _tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    return "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])


def _run(command: list[str], cwd: Path, log: Path | None = None) -> None:
    result = subprocess.run(  # noqa: S603 - programs found above, arguments of our own
        command, cwd=cwd, capture_output=True, text=True, timeout=2 * _TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(command)} exited {result.returncode}:\n"
            f"{result.stdout}{result.stderr}{_tail(log)}"
        )


class _Postgres:
    def __init__(self, folder: Path, port: int, tools: dict[str, Path]) -> None:
        self._folder = folder
        self._port = port
        self._data = folder / "data"
        self._log = folder / "server.log"
        self._initdb = str(tools["initdb"])
        self._pg_ctl = str(tools["pg_ctl"])
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"
        self.admin_url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def _as_owner(self, *command: str) -> list[str]:
        return ["runuser", "-u", _POSTGRES_USER, "--", *command] if _AS_ROOT else list(command)

    def create(self) -> None:
        if _AS_ROOT:
            owner = pwd.getpwnam(_POSTGRES_USER)
            os.chown(self._folder, owner.pw_uid, owner.pw_gid)
        # The shared server's encoding and locale; no fsync, since the data dies with the test.
        initdb = (self._initdb, "-D", str(self._data), "-A", "trust", "-U", "postgres")
        settings = ("--no-sync", "-E", "UTF8", "--locale=C.UTF-8")
        _run(self._as_owner(*initdb, *settings), self._folder)

    def start(self) -> None:
        options = f"-p {self._port} -k {self._folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        start = ("-l", str(self._log), "-o", options, "-w", "-t", str(_TIMEOUT_S), "start")
        _run(self._as_owner(self._pg_ctl, "-D", str(self._data), *start), self._folder, self._log)

    def stop(self, mode: str = "fast") -> None:
        stop = ("-m", mode, "-w", "-t", str(_TIMEOUT_S), "stop")
        _run(self._as_owner(self._pg_ctl, "-D", str(self._data), *stop), self._folder, self._log)

    def ensure_stopped(self) -> None:
        status = [self._pg_ctl, "-D", str(self._data), "status"]
        running = subprocess.run(  # noqa: S603 - a program found above
            self._as_owner(*status), cwd=self._folder, capture_output=True, check=False
        )
        if running.returncode != 0:  # 3: not running; 4: never created
            return
        try:
            self.stop()
        except (RuntimeError, subprocess.SubprocessError):
            self.stop(mode="immediate")


class _Mariadb:
    def __init__(self, folder: Path, port: int, tools: dict[str, Path]) -> None:
        self._folder = folder
        self._port = port
        self._data = folder / "data"
        self._log = folder / "server.log"
        self._tools = tools
        self._process: subprocess.Popen[bytes] | None = None
        self.url = f"mysql+pymysql://root@127.0.0.1:{port}/test"
        self.admin_url = f"mysql+pymysql://root@127.0.0.1:{port}"

    def _common(self) -> list[str]:
        # --no-defaults first: the system's my.cnf names the shared server's user (mysql, who
        # cannot write our folder), port, socket and log.  As root, mariadbd switches to the
        # user named here; root owns the folder.
        return ["--no-defaults", f"--datadir={self._data}", *(["--user=root"] if _AS_ROOT else [])]

    def _admin(self, *command: str) -> list[str]:
        where = ("-h127.0.0.1", f"-P{self._port}", "--protocol=tcp", "-uroot")
        return [str(self._tools["mariadb-admin"]), "--no-defaults", *where, *command]

    def create(self) -> None:
        # A passwordless root (for 127.0.0.1 too) and no database but the system's.
        install = (str(self._tools["mariadb-install-db"]), *self._common())
        options = ("--auth-root-authentication-method=normal", "--skip-test-db")
        _run([*install, *options], self._folder)

    def start(self) -> None:
        listen = (f"--port={self._port}", "--bind-address=127.0.0.1", "--skip-name-resolve")
        files = (f"--socket={self._folder / 'mariadbd.sock'}", f"--pid-file={self._folder / 'pid'}")
        charset = ("--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci")
        command = [str(self._tools["mariadbd"]), *self._common(), *listen, *files, *charset]
        with self._log.open("ab") as log:  # without --log-error, its log goes to stderr
            self._process = subprocess.Popen(  # noqa: S603 - a program found above
                command, cwd=self._folder, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline = time.monotonic() + _TIMEOUT_S
        while self._process.poll() is None and time.monotonic() < deadline:
            ping = subprocess.run(  # noqa: S603 - a program found above
                self._admin("--connect-timeout=2", "ping"), capture_output=True, check=False
            )
            if ping.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"mariadbd did not answer on port {self._port}{_tail(self._log)}")

    def stop(self) -> None:
        """Returns once the server has exited (the shutdown command does not wait)."""
        _run(self._admin("shutdown"), self._folder, self._log)
        if self._process is not None:
            self._process.wait(timeout=_TIMEOUT_S)

    def ensure_stopped(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        try:
            self.stop()
        except (RuntimeError, subprocess.SubprocessError):
            self._process.kill()
            self._process.wait(timeout=_TIMEOUT_S)


_SERVERS: Final[dict[str, Callable[[Path, int, dict[str, Path]], _Server]]] = {
    "postgres": _Postgres,
    "mariadb": _Mariadb,
}


def _create_test_database(admin_url: str) -> None:
    engine = create_engine(admin_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text("CREATE DATABASE test"))
    finally:
        engine.dispose()


@contextmanager
def running_private_server(kind: str) -> Iterator[PrivateServer]:
    """A new ``postgres`` or ``mariadb`` server with an empty database ``test``; stopped and
    its folder removed on the way out."""
    tools = _tools_or_skip(kind)
    folder = Path(tempfile.mkdtemp(prefix=f"recordsync-{kind}-"))
    try:
        server = _SERVERS[kind](folder, _free_port(), tools)
        try:
            server.create()
            server.start()
            _create_test_database(server.admin_url)
            yield PrivateServer(kind, server.url, folder, stop=server.stop, start=server.start)
        finally:
            server.ensure_stopped()
    finally:
        shutil.rmtree(folder)


@pytest.fixture(params=SERVER_PARAMS)
def private_server(request: pytest.FixtureRequest) -> Iterator[PrivateServer]:
    """A server of the test's own to stop and start (ids: postgres, mariadb)."""
    with running_private_server(request.param) as server:
        yield server

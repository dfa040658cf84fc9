"""Database fixtures shared by the whole test suite (imported by tests/conftest.py).

- ``warehouse_url``: parametrized over ``sqlite``, ``postgres`` and ``mariadb`` (the test ids);
  yields the SQLAlchemy URL of a uniquely named, EMPTY database made for the test.  Any test
  that asks for it (or for ``warehouse``) runs once per backend.
- ``warehouse``: a migrated ``Warehouse`` on that URL, closed after the test.  On SQLite its
  database is a copy of a migrated template file made once per worker process.  On the servers
  it is the worker's one migrated database of that server, emptied after each test back to
  what migrating a new one leaves, with a new ``warehouse_identity`` (dbreuse.py says how and
  when a database is found unfit and retired instead); the first is a copy of a migrated
  template (PostgreSQL ``CREATE DATABASE ... TEMPLATE``, MariaDB's tables and views copied one
  by one) rather than fifteen migrations.  A test that changes the schema it was given (a
  downgrade, a next revision) says so with ``@pytest.mark.fresh_database`` and gets a copy of
  its own, never used again.

The databases made for one test are not dropped after it but at the end of the session, all
together (``drop_made_databases``): on PostgreSQL every DROP DATABASE waits for a checkpoint of
the whole server, which in the middle of the suite is seconds of other tests' writes to flush.
The templates are dropped when the process exits.

Servers come from ``RECORDSYNC_TEST_POSTGRES_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``) and ``RECORDSYNC_TEST_MARIADB_URL``
(default ``mysql+pymysql://root@127.0.0.1:3306/test``); those URLs name an existing database
used only to create and drop the test ones.  When a server cannot be reached its tests
SKIP with a reason that says how to start it, unless ``RECORDSYNC_REQUIRE_SERVICES=1``, when
they FAIL (CI sets it, so a missing service can never turn into a green run).

To run on the servers only, ``@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS,
indirect=True)``; for any other combination use ``fresh_database(kind, tmp_path)`` directly
(``BACKEND_PARAMS`` carries the ids and markers).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

import pytest
from sqlalchemy import Connection, Engine, create_engine, pool, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

from recordsync.warehouse import Warehouse
from support import dbreuse
from support.leftovers import kill_left_behind

POSTGRES_URL_ENV: Final = "RECORDSYNC_TEST_POSTGRES_URL"
MARIADB_URL_ENV: Final = "RECORDSYNC_TEST_MARIADB_URL"
REQUIRE_SERVICES_ENV: Final = "RECORDSYNC_REQUIRE_SERVICES"

_DEFAULT_URLS: Final = {
    "postgres": "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "mariadb": "mysql+pymysql://root@127.0.0.1:3306/test",
}
_URL_ENVS: Final = {"postgres": POSTGRES_URL_ENV, "mariadb": MARIADB_URL_ENV}
_HOW_TO_START: Final = {
    "postgres": (
        "start PostgreSQL 15 with trust auth and a database 'test', e.g. `docker run -d "
        "-p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test postgres:15`"
    ),
    "mariadb": (
        "start MariaDB 10.11 with a passwordless root and a database 'test', e.g. `docker run "
        "-d -p 3306:3306 -e MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1 -e MARIADB_DATABASE=test "
        "mariadb:10.11`"
    ),
}
_CONNECT_TIMEOUT_S: Final = 3

BACKEND_PARAMS: Final = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
]
# For tests that need a server (say, to kill a session): parametrize("warehouse_url", ...,
# indirect=True) with these.
SERVER_PARAMS: Final = [param for param in BACKEND_PARAMS if param.id != "sqlite"]


def server_url(kind: str) -> URL:
    """The admin URL of the ``postgres`` or ``mariadb`` test server."""
    return make_url(os.environ.get(_URL_ENVS[kind], _DEFAULT_URLS[kind]))


def _admin_engine(url: URL) -> Engine:
    """Autocommit, since CREATE/DROP DATABASE refuse to run inside a transaction."""
    return create_engine(
        url,
        poolclass=pool.NullPool,
        isolation_level="AUTOCOMMIT",
        connect_args={"connect_timeout": _CONNECT_TIMEOUT_S},  # psycopg and PyMySQL alike
    )


@cache
def _unreachable(kind: str, url: URL) -> str | None:
    """Why the server at ``url`` cannot be used, or None; asked once per session and URL."""
    engine = _admin_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as error:  # noqa: BLE001 - any failure means "not usable", reported below
        shown = url.render_as_string(hide_password=True)
        cause = (str(getattr(error, "orig", error)).strip().splitlines() or [""])[0][:200]
        return (
            f"{kind} server not reachable at {shown} ({type(error).__name__}: {cause}); "
            f"{_HOW_TO_START[kind]}, or point {_URL_ENVS[kind]} at one"
        )
    finally:
        engine.dispose()
    return None


def require_server(kind: str) -> URL:
    """The admin URL of ``kind``'s server; skips (or fails, under
    RECORDSYNC_REQUIRE_SERVICES=1) when it cannot be reached."""
    url = server_url(kind)
    reason = _unreachable(kind, url)
    if reason is None:
        return url
    if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
        pytest.fail(f"{reason} [{REQUIRE_SERVICES_ENV}=1]", pytrace=False)
    pytest.skip(reason)


@contextmanager
def fresh_database(kind: str, tmp_path: Path, *, migrated: bool = False) -> Iterator[str]:
    """Create a uniquely named database of ``kind``, empty or (``migrated``, where the backend
    can copy a template) at the current schema; yield its URL; drop it after."""
    if kind == "sqlite":
        path = tmp_path / "warehouse.db"
        if migrated:
            shutil.copyfile(_sqlite_template(), path)
            _new_identity(f"sqlite:///{path}")
        yield f"sqlite:///{path}"
        return
    url = require_server(kind)
    name = _create_database(kind, url, migrated=migrated)
    made = url.set(database=name).render_as_string(hide_password=False)
    if migrated:
        _new_identity(made)
    yield made


def _create_database(kind: str, url: URL, *, migrated: bool) -> str:
    """A new database on ``kind``'s server at ``url``, empty or migrated, dropped at the end of
    the session (``drop_made_databases``): its name."""
    name = f"rs_{secrets.token_hex(6)}"
    copied = f" TEMPLATE {_postgres_template(url)}" if migrated and kind == "postgres" else ""
    admin = _admin_engine(url)
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}{copied}"))
            _MADE.append((kind, url, name))
            if migrated and kind == "mariadb":
                copy_mariadb_schema(conn, _mariadb_template(url), name)
    finally:
        admin.dispose()
    return name


# -- the databases made, dropped together at the end --------------------------------------------

_MADE: list[tuple[str, URL, str]] = []  # (kind, server URL, database) in the order made


def drop_made_databases() -> None:
    """Drop every database this process made, each test's session ended first (FORCE, or
    MariaDB's DROP, which ends none but takes what it waits for)."""
    while _MADE:
        kind, url, name = _MADE.pop()
        if kind == "postgres":
            _drop_database(url, name, force=True)
        else:
            admin = _admin_engine(url)
            try:
                with contextlib.suppress(Exception):
                    dbreuse.end_sessions(kind, admin, name)
            finally:
                admin.dispose()
            _drop_database(url, name)


atexit.register(drop_made_databases)  # a session cut short still drops what it made


# -- the worker's migrated database per server, used again once emptied ------------------------


@dataclass
class _Reused:
    name: str
    url: str
    migrated: str  # dbreuse.fingerprint just after it was made


_FREE: dict[tuple[str, str], _Reused] = {}  # (kind, server) -> the database no test is using


@contextmanager
def reused_database(kind: str) -> Iterator[str]:
    """The URL of this worker's migrated database on ``kind``'s server, emptied back to its
    migrated state after the test, or retired (dropped at the end) when it cannot be."""
    url = require_server(kind)
    key = (kind, url.render_as_string(hide_password=False))
    database = _FREE.pop(key, None)
    if database is None:
        name = _create_database(kind, url, migrated=True)
        made = url.set(database=name).render_as_string(hide_password=False)
        _new_identity(made)
        database = _Reused(name, made, _fingerprint(kind, made))
    yield database.url
    kill_left_behind()  # a daemon still running would write into the next test's warehouse
    admin = _admin_engine(url)
    engine = create_engine(database.url, poolclass=pool.NullPool)
    try:
        dbreuse.end_sessions(kind, admin, database.name)
        dbreuse.empty_again(kind, engine, database.migrated)
    except Exception:  # noqa: BLE001, S110 - whatever stops the emptying, never used again
        pass  # retired: dropped at the end like the fresh ones, a new one made when asked
    else:
        _FREE[key] = database
    finally:
        engine.dispose()
        admin.dispose()


def _fingerprint(kind: str, url: str) -> str:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        return dbreuse.fingerprint(kind, engine)
    finally:
        engine.dispose()


def _new_identity(url: str) -> None:
    """A copy of the template is a warehouse of its own, as a new one migrated would be: an
    identity of its own (``warehouse_identity``), not the template's."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE warehouse_identity SET warehouse_id = :id"), {"id": str(uuid.uuid4())}
            )
    finally:
        engine.dispose()


# -- migrated templates, one per worker process and backend ----------------------------------

_TEMPLATES: dict[str, str] = {}  # "sqlite" -> a file path, "postgres" -> a database name
_TEMPLATES_LOCK = threading.Lock()


def _sqlite_template() -> str:
    with _TEMPLATES_LOCK:
        if "sqlite" not in _TEMPLATES:
            folder = tempfile.mkdtemp(prefix="recordsync-template-")
            path = os.path.join(folder, "template.db")  # noqa: PTH118 - a plain str path
            store = Warehouse.connect(f"sqlite:///{path}")
            try:
                store.migrate()
            finally:
                store.close()  # the last connection checkpoints the WAL into the file
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _TEMPLATES["sqlite"] = path
        return _TEMPLATES["sqlite"]


def _postgres_template(url: URL) -> str:
    """A migrated database no session may connect to: so autovacuum never holds it when a
    test's ``CREATE DATABASE ... TEMPLATE`` needs it alone."""
    with _TEMPLATES_LOCK:
        if "postgres" not in _TEMPLATES:
            name = f"rs_template_{secrets.token_hex(6)}"
            admin = _admin_engine(url)
            try:
                with admin.connect() as conn:
                    conn.execute(text(f"CREATE DATABASE {name}"))
                store = Warehouse.connect(url.set(database=name).render_as_string(False))
                try:
                    store.migrate()
                finally:
                    store.close()
                with admin.connect() as conn:
                    conn.execute(
                        text(f"ALTER DATABASE {name} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
                    )
            finally:
                admin.dispose()
            atexit.register(_drop_postgres_template, url, name)
            _TEMPLATES["postgres"] = name
        return _TEMPLATES["postgres"]


def _mariadb_template(url: URL) -> str:
    with _TEMPLATES_LOCK:
        if "mariadb" not in _TEMPLATES:
            name = f"rs_template_{secrets.token_hex(6)}"
            admin = _admin_engine(url)
            try:
                with admin.connect() as conn:
                    conn.execute(text(f"CREATE DATABASE {name}"))
            finally:
                admin.dispose()
            store = Warehouse.connect(url.set(database=name).render_as_string(False))
            try:
                store.migrate()
            finally:
                store.close()
            atexit.register(_drop_database, url, name)
            _TEMPLATES["mariadb"] = name
        return _TEMPLATES["mariadb"]


def copy_mariadb_schema(conn: Connection, source: str, target: str) -> None:
    """``target`` made what ``source`` is, for MariaDB, which has no template databases: each
    table by ``CREATE TABLE ... LIKE`` (columns, keys, checks, options, partitions) with its
    rows (the schema's version), then each view with its database's name replaced, in as
    many passes as views built on views need, then each trigger."""
    tables = conn.execute(
        text(
            "SELECT table_name, table_type FROM information_schema.tables"
            " WHERE table_schema = :source"
        ),
        {"source": source},
    ).all()
    for table, kind in tables:
        if kind == "BASE TABLE":
            conn.execute(text(f"CREATE TABLE `{target}`.`{table}` LIKE `{source}`.`{table}`"))
            conn.execute(
                text(f"INSERT INTO `{target}`.`{table}` SELECT * FROM `{source}`.`{table}`")
            )
    views = {
        table: conn.execute(text(f"SHOW CREATE VIEW `{source}`.`{table}`")).one()[1]
        for table, kind in tables
        if kind == "VIEW"
    }
    while views:
        made = set()
        for view, definition in views.items():
            try:
                conn.execute(text(f"USE `{target}`"))
                conn.execute(text(definition.replace(f"`{source}`.", f"`{target}`.")))
            except DBAPIError:
                continue  # built on a view not made yet: the next pass
            made.add(view)
        if not made:
            raise RuntimeError(f"views of {source} that cannot be copied: {sorted(views)}")
        views = {view: definition for view, definition in views.items() if view not in made}
    triggers = conn.execute(
        text("SELECT trigger_name FROM information_schema.triggers WHERE trigger_schema = :source"),
        {"source": source},
    ).scalars()
    conn.execute(text(f"USE `{target}`"))
    for trigger in list(triggers):
        definition = conn.execute(text(f"SHOW CREATE TRIGGER `{source}`.`{trigger}`")).one()[2]
        conn.exec_driver_sql(definition)


def _drop_database(url: URL, name: str, *, force: bool = False) -> None:
    admin = _admin_engine(url)
    try:
        with contextlib.suppress(Exception), admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}{' WITH (FORCE)' if force else ''}"))
    finally:
        admin.dispose()


def _drop_postgres_template(url: URL, name: str) -> None:
    admin = _admin_engine(url)
    # At the process's exit the server may have gone first: then nothing is left to drop.
    try:
        with contextlib.suppress(Exception), admin.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {name} WITH IS_TEMPLATE false"))
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
    finally:
        admin.dispose()


@pytest.fixture(scope="session", autouse=True)
def databases_dropped_at_the_end() -> Iterator[None]:
    """The test databases this worker made, dropped once every test has run."""
    yield
    drop_made_databases()


@pytest.fixture(params=BACKEND_PARAMS)
def warehouse_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a database on each backend (ids: sqlite, postgres, mariadb): a new empty
    one, or, when the test also asks for ``warehouse``, a migrated one: the worker's, emptied
    (servers), or a copy of the template (SQLite, and tests marked ``fresh_database``)."""
    kind = request.param
    migrated = "warehouse" in request.fixturenames
    if migrated and kind != "sqlite" and request.node.get_closest_marker("fresh_database") is None:
        with reused_database(kind) as url:
            yield url
        return
    with fresh_database(kind, tmp_path, migrated=migrated) as url:
        yield url


@pytest.fixture
def warehouse(warehouse_url: str) -> Iterator[Warehouse]:
    """A migrated ``Warehouse`` on ``warehouse_url``, closed after the test."""
    store = Warehouse.connect(warehouse_url)
    try:
        store.migrate()
        yield store
    finally:
        store.close()

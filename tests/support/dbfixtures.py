"""Database fixtures shared by the whole test suite (imported by tests/conftest.py).

- ``warehouse_url``: parametrized over ``sqlite``, ``postgres`` and ``mariadb`` (the test ids);
  yields the SQLAlchemy URL of a freshly created, uniquely named, EMPTY database, dropped after
  the test.  Any test that asks for it (or for ``warehouse``) runs once per backend.
- ``warehouse``: a migrated ``Warehouse`` on that URL, closed after the test.  Its database is
  a copy of a migrated template made once per worker process (PostgreSQL ``CREATE DATABASE
  ... TEMPLATE``, a copied SQLite file, MariaDB's tables and views copied one by one) rather
  than eight migrations per test.  The templates are dropped when the process exits.

Servers come from ``RECORDSYNC_TEST_POSTGRES_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``) and ``RECORDSYNC_TEST_MARIADB_URL``
(default ``mysql+pymysql://root@127.0.0.1:3306/test``); those URLs name an existing database
used only to create and drop the per-test ones.  When a server cannot be reached its tests
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
from functools import cache
from pathlib import Path
from typing import Final

import pytest
from sqlalchemy import Connection, Engine, create_engine, pool, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

from recordsync.warehouse import Warehouse

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
    name = f"rs_{secrets.token_hex(6)}"
    copied = f" TEMPLATE {_postgres_template(url)}" if migrated and kind == "postgres" else ""
    admin = _admin_engine(url)
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}{copied}"))
            if migrated and kind == "mariadb":
                copy_mariadb_schema(conn, _mariadb_template(url), name)
        made = url.set(database=name).render_as_string(hide_password=False)
        if migrated:
            _new_identity(made)
        try:
            yield made
        finally:
            drop = (
                f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                if kind == "postgres"
                else f"DROP DATABASE IF EXISTS {name}"
            )
            with admin.connect() as conn:
                conn.execute(text(drop))
    finally:
        admin.dispose()


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


def _drop_database(url: URL, name: str) -> None:
    admin = _admin_engine(url)
    try:
        with contextlib.suppress(Exception), admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
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


@pytest.fixture(params=BACKEND_PARAMS)
def warehouse_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a new database on each backend (ids: sqlite, postgres, mariadb): empty, or
    already migrated from the worker's template when the test also asks for ``warehouse``."""
    migrated = "warehouse" in request.fixturenames
    with fresh_database(request.param, tmp_path, migrated=migrated) as url:
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

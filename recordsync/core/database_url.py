"""The warehouse's database URL, checked when the settings are read (no connection made).

Which databases recordsync writes, and through which drivers, is decided here once, so the
settings can refuse a bad URL with every other problem at start-up (exit code 2) and the
warehouse connects with the same reading:

- SQLite (``sqlite:///path``), PostgreSQL (``postgresql://``, or ``postgres://``, the form
  many hosting providers hand out) and MariaDB (``mysql://``, ``mariadb://``);
- the server databases are written through the drivers recordsync ships with, psycopg 3 and
  PyMySQL, whose bulk paths the page writers use; a URL without a driver gets that driver, a
  URL naming another driver is refused with the one to use.

Messages never show the URL itself: it may carry a password.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Final

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from recordsync.core.errors import ConfigurationError

MYSQL_FAMILY: Final = ("mysql", "mariadb")
SUPPORTED_BACKENDS: Final = frozenset({"sqlite", "postgresql", *MYSQL_FAMILY})
# Names a URL may use for a backend that SQLAlchemy itself no longer accepts.
BACKEND_ALIASES: Final = {"postgres": "postgresql"}
# The driver each server database is written through (see above).
WRITER_DRIVERS: Final = {"postgresql": "psycopg", **dict.fromkeys(MYSQL_FAMILY, "pymysql")}
# The extra that installs each driver (pyproject.toml), for the line that names it.
DRIVER_EXTRAS: Final = {"psycopg": "postgres", "pymysql": "mysql"}
EXAMPLES: Final = (
    "sqlite:///path/to/file.db, postgresql://user@host/database (or postgres://), "
    "mysql://user@host/database or mariadb://user@host/database"
)


def parse_database_url(url: str | URL) -> URL:
    """``url`` as the warehouse connects to it, or ``ConfigurationError`` saying what to use."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigurationError(f"not a database URL; use one of {EXAMPLES}") from None
    backend = parsed.get_backend_name()
    if backend in BACKEND_ALIASES:
        backend = BACKEND_ALIASES[backend]
        driver = parsed.drivername.partition("+")[2]
        parsed = parsed.set(drivername=f"{backend}+{driver}" if driver else backend)
    if backend not in SUPPORTED_BACKENDS:
        raise ConfigurationError(f"unsupported database {backend!r}; use one of {EXAMPLES}")
    if backend in WRITER_DRIVERS and "+" not in parsed.drivername:
        parsed = parsed.set(drivername=f"{backend}+{WRITER_DRIVERS[backend]}")
    check_driver(backend, parsed.get_driver_name())
    check_driver_installed(parsed.get_driver_name())
    return parsed


def check_driver_installed(driver: str) -> None:
    """A server database on a plain install: one line naming the extra, not the 25-line
    ``ModuleNotFoundError`` of the first connection."""
    extra = DRIVER_EXTRAS.get(driver)
    if extra is None or importlib.util.find_spec(driver) is not None:
        return
    raise ConfigurationError(
        f"the {driver} driver is not installed: install recordsync[{extra}] "
        f"(pip install 'recordsync[{extra}]', or pip install -e '.[{extra}]' from a checkout)"
    )


def check_sqlite_folder(url: str | URL) -> None:
    """A SQLite file's folder must exist and take new files (the database, its journal and
    write-ahead log): otherwise every command would retry "unable to open database file" for
    ever, never naming the folder.  Tried by creating a file there, which also
    tells a read-only file system apart for a user whom permissions do not stop."""
    parsed = make_url(url)
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return
    folder = Path(path).absolute().parent
    if not folder.is_dir():
        raise ConfigurationError(
            f"the folder of the SQLite file, {folder}, does not exist: create it, or choose "
            "another path"
        )
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".recordsync-"):
            pass
    except OSError as exc:
        user = os.getuid() if hasattr(os, "getuid") else "this user"
        raise ConfigurationError(
            f"the folder of the SQLite file, {folder}, cannot be written by uid {user} "
            f"({exc.strerror}): SQLite creates its journal there; choose a writable folder"
        ) from None


def check_driver(backend: str, driver: str) -> None:
    """Refuse a server database reached through a driver recordsync does not write through."""
    wanted = WRITER_DRIVERS.get(backend)
    if wanted is not None and driver != wanted:
        raise ConfigurationError(
            f"{backend} warehouses are written through {wanted}: use a {backend}+{wanted}:// "
            f"URL (or {backend}://), not {backend}+{driver}://"
        )


def shown(url: str | URL) -> str:
    """A URL for logs and messages: the password hidden, an unparseable one not shown at all."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(not a database URL)"

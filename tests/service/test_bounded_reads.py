"""Every read command's wait on the warehouse is bounded: behind a table
another session locked (a migration, a ``VACUUM FULL``, an operator's ``LOCK TABLES``),
``status --check`` answers "not ready" within ``PROBE_SECONDS`` and exit 1, and ``status``
and ``report`` end with one line saying why, instead of waiting for as long as the lock is
held (before: ``status --check`` still waited after 20 s)."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, inspect, pool, text
from sqlalchemy.engine import make_url

from recordsync import cli
from recordsync.warehouse import Warehouse
from recordsync.warehouse.connection import sqlite_file
from recordsync.warehouse.schema import VERSION_TABLE
from recordsync.warehouse.timeouts import PROBE_SECONDS, READS

MERCHANT = "m-locked"


def write_config(tmp_path, url):
    path = tmp_path / f"recordsync-{secrets.token_hex(3)}.toml"
    path.write_text(  # the platform's settings for the dry run, which never gets that far
        f'merchant_id = "{MERCHANT}"\ndatabase_url = "{url}"\n'
        f'base_url = "http://127.0.0.1:9"\nsecret = "{"s" * 43}"\n'
        'history_from = "2026-01-01T00:00:00Z"\n'
    )
    return str(path)


@contextmanager
def every_table_locked(url: str) -> Iterator[None]:
    """Another session holds every table of the warehouse but the schema's version row, so
    that the commands get past the schema check and wait at their own first read: ACCESS
    EXCLUSIVE on PostgreSQL, ``LOCK TABLES ... WRITE`` on MariaDB; on SQLite, whose WAL lets
    readers past any writer, a writer in exclusive locking mode (the whole file)."""
    parsed = make_url(url)
    path = sqlite_file(parsed)
    if path is not None:
        import sqlite3  # noqa: PLC0415 - only this backend needs it

        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("PRAGMA locking_mode = EXCLUSIVE")
            conn.execute("BEGIN EXCLUSIVE")
            conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = version_num")
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    engine = create_engine(parsed, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            tables = [t for t in inspect(conn).get_table_names() if t != VERSION_TABLE]
            if parsed.get_backend_name() == "postgresql":
                conn.execute(text(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE"))
                unlock = "ROLLBACK"
            else:
                conn.execute(text("LOCK TABLES " + ", ".join(f"`{t}` WRITE" for t in tables)))
                unlock = "UNLOCK TABLES"
            try:
                yield
            finally:
                conn.execute(text(unlock))
    finally:
        engine.dispose()


def test_status_check_answers_not_ready_within_its_limit_behind_a_lock(
    warehouse: Warehouse, warehouse_url: str, tmp_path, capsys
):
    warehouse.close()  # its pooled sessions would keep SQLite's exclusive lock out
    config = write_config(tmp_path, warehouse_url)
    assert cli.main(["--config", config, "status", "--check"]) == 1  # no commit yet: not ready
    assert capsys.readouterr().out.startswith("not ready: no page committed")
    with every_table_locked(warehouse_url):
        started = time.monotonic()
        code = cli.main(["--config", config, "status", "--check"])
        took = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 1, out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith("not ready: warehouse: warehouse unavailable"), lines
    assert "lock" in lines[0].lower(), lines  # the reason: a lock, not a mystery
    assert took < PROBE_SECONDS, took
    assert "Traceback" not in err


DRY_RUN = ["backfill", "--from", "2026-02-01T00:00:00Z", "--to", "2026-02-02T00:00:00Z"]


@pytest.mark.parametrize(
    "argv",
    [["status"], ["status", "--json"], ["report", "--days", "2"], [*DRY_RUN, "--dry-run"]],
    ids=["status", "status-json", "report", "dry-run"],
)
def test_read_commands_end_with_one_line_behind_a_lock(
    warehouse: Warehouse, warehouse_url: str, tmp_path, capsys, argv
):
    warehouse.close()
    config = write_config(tmp_path, warehouse_url)
    with every_table_locked(warehouse_url):
        started = time.monotonic()
        code = cli.main(["--config", config, *argv])
        took = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 1, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("recordsync: error: warehouse unavailable ("), lines
    assert "lock" in lines[0].lower(), lines
    assert "Traceback" not in err
    # One lock wait (READS), the connection and the schema check: far from "for ever".
    assert took < READS.lock_wait + 5, took


@pytest.mark.parametrize("warehouse_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    "command", [["status"], ["report", "--days", "7"]], ids=["status", "report"]
)
def test_a_read_command_stopped_by_a_signal_ends_in_one_line(
    warehouse: Warehouse, warehouse_url: str, tmp_path, signum: int, command: list[str]
):
    """Ctrl-C (or a SIGTERM) while ``status`` or ``report`` waits at its first read: one line
    and 128 + the signal, never Python's traceback of a KeyboardInterrupt (nor, for SIGTERM,
    an end with no word)."""
    warehouse.close()
    config = write_config(tmp_path, warehouse_url)
    watcher = create_engine(make_url(warehouse_url), poolclass=pool.NullPool)
    try:
        with every_table_locked(warehouse_url):
            process = subprocess.Popen(  # noqa: S603 - our own CLI, a process of its own
                [sys.executable, "-m", "recordsync", "--config", config, *command],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.monotonic() + 20
            while not _waits_for_a_lock(watcher):
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the command never reached the lock"
                time.sleep(0.05)
            process.send_signal(signum)
            _, stderr = process.communicate(timeout=20)
    finally:
        watcher.dispose()
    name = signal.Signals(signum).name
    assert process.returncode == 128 + signum, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"recordsync: interrupted by {name}: run the same command again"
    )
    assert "Traceback" not in stderr


def _waits_for_a_lock(engine) -> bool:
    with engine.connect() as conn:
        waiting = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
    return bool(waiting)

"""Read commands never write: ``status`` and ``report`` run with read-only database accounts,
never migrate, and say plainly when the schema is behind, ahead or absent.
A daemon on a warehouse at an unknown schema says so once and stops with exit code 2."""

from __future__ import annotations

import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url
from support.dbfixtures import SERVER_PARAMS
from support.pages import commit_window_page
from support.warehouse_samples import make_record

from recordsync import cli
from recordsync.core.state import REBUILD_JOB, Window
from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import head_revision, schema_state, upgrade

MERCHANT = "m-read"
T0 = datetime(2026, 3, 2, tzinfo=UTC)


def write_config(tmp_path, url):
    path = tmp_path / f"recordsync-{secrets.token_hex(3)}.toml"
    path.write_text(f'merchant_id = "{MERCHANT}"\ndatabase_url = "{url}"\n')
    return str(path)


def revision_of(url):
    store = Warehouse.connect(url)
    try:
        with store.engine.connect() as conn:
            return schema_state(conn).current
    finally:
        store.close()


def fill(url):
    """A migrated warehouse with one committed snapshot page."""
    store = Warehouse.connect(url)
    try:
        store.migrate()
        window = Window(T0 - timedelta(days=1), T0)
        store.state.start_rebuild(
            MERCHANT,
            change_cursor="c",
            anchor_at=T0,
            history_from=window.start,
            snapshot_to=window.end,
            windows=[window],
        )
        commit_window_page(
            store,
            MERCHANT,
            REBUILD_JOB,
            window,
            records=[make_record("r-1", 2, created_at=T0 - timedelta(hours=3))],
            rejected=[],
            next_cursor=None,
            cursor_issued_at=T0,
            done=True,
            position="first",
        )
    finally:
        store.close()


READ_COMMANDS = [["status"], ["status", "--json"], ["report", "--days", "2"]]
READ_IDS = ["status", "status-json", "report"]


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=READ_IDS)
def test_a_warehouse_never_migrated_is_refused_and_left_untouched(
    warehouse_url, tmp_path, capsys, argv
):
    store = Warehouse.connect(warehouse_url)
    store.ping()  # connected once: SQLite's file now exists, empty
    store.close()
    config = write_config(tmp_path, warehouse_url)
    assert cli.main(["--config", config, *argv]) == 2
    err = capsys.readouterr().err
    assert "never migrated" in err
    assert "recordsync migrate" in err
    assert revision_of(warehouse_url) is None


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=READ_IDS)
def test_a_schema_behind_this_version_is_named_and_not_upgraded(
    warehouse_url, tmp_path, capsys, argv
):
    store = Warehouse.connect(warehouse_url)
    try:
        upgrade(store.engine, "0002")
    finally:
        store.close()
    config = write_config(tmp_path, warehouse_url)
    assert cli.main(["--config", config, *argv]) == 2
    err = capsys.readouterr().err
    assert "revision 0002" in err
    assert f"reads revision {head_revision()}" in err
    assert "recordsync migrate" in err
    assert revision_of(warehouse_url) == "0002"


def set_revision(url, revision):
    store = Warehouse.connect(url)
    try:
        store.migrate()
        with store.engine.begin() as conn:
            conn.execute(
                text("UPDATE recordsync_alembic_version SET version_num = :v"), {"v": revision}
            )
    finally:
        store.close()


@pytest.mark.parametrize("argv", [*READ_COMMANDS, ["migrate"]], ids=[*READ_IDS, "migrate"])
def test_a_schema_from_a_newer_version_is_named_and_left_alone(
    warehouse_url, tmp_path, capsys, argv
):
    set_revision(warehouse_url, "0099_future")
    config = write_config(tmp_path, warehouse_url)
    assert cli.main(["--config", config, *argv]) == 2
    err = capsys.readouterr().err
    assert "0099_future" in err
    assert "does not know" in err
    assert "Traceback" not in err
    assert revision_of(warehouse_url) == "0099_future"


def test_a_missing_sqlite_file_is_an_error_and_is_not_created(tmp_path, capsys):
    path = tmp_path / "absent.db"
    config = write_config(tmp_path, f"sqlite:///{path}")
    assert cli.main(["--config", config, "status"]) == 2
    assert f"no warehouse at {path}" in capsys.readouterr().err
    assert not path.exists()


def test_status_check_reports_a_schema_behind_as_not_ready(warehouse_url, tmp_path, capsys):
    store = Warehouse.connect(warehouse_url)
    try:
        upgrade(store.engine, "0002")
    finally:
        store.close()
    config = write_config(tmp_path, warehouse_url)
    assert cli.main(["--config", config, "status", "--check"]) == 1
    assert capsys.readouterr().out.startswith("not ready: warehouse: the warehouse schema")
    assert revision_of(warehouse_url) == "0002"


# -- a read-only account: the BI user's ------------------------------------------------------


def _read_only_url(url):
    """A new login that may only SELECT in ``url``'s database (dropped by the caller)."""
    parsed = make_url(url)
    name = f"ro_{secrets.token_hex(4)}"
    admin = create_engine(parsed, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if parsed.get_backend_name() == "postgresql":
                conn.execute(text(f"CREATE ROLE {name} LOGIN"))
                conn.execute(text(f"GRANT CONNECT ON DATABASE {parsed.database} TO {name}"))
                conn.execute(text(f"GRANT USAGE ON SCHEMA public TO {name}"))
                conn.execute(text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {name}"))
                drop = [f"DROP OWNED BY {name}", f"DROP ROLE {name}"]
            else:
                conn.execute(text(f"CREATE USER '{name}'@'%'"))
                conn.execute(text(f"GRANT SELECT ON {parsed.database}.* TO '{name}'@'%'"))
                drop = [f"DROP USER '{name}'@'%'"]
    finally:
        admin.dispose()
    ro = parsed.set(username=name, password=None).render_as_string(hide_password=False)
    return ro, drop


HOLDER = "host-ro-4242-cafe"
# What each read command shows: status also names the replica holding the merchant.
SHOWN = [[MERCHANT, HOLDER], [MERCHANT, f'"holder": "{HOLDER}"'], [MERCHANT]]
READ_CASES = list(zip(READ_COMMANDS, SHOWN, strict=True))


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
@pytest.mark.parametrize(("argv", "shown"), READ_CASES, ids=READ_IDS)
def test_read_commands_work_with_a_read_only_account(warehouse_url, tmp_path, capsys, argv, shown):
    fill(warehouse_url)
    ro_url, drop = _read_only_url(warehouse_url)
    store = Warehouse.connect(warehouse_url)
    holder = store.fleet_session(HOLDER)  # a replica holding the merchant meanwhile
    try:
        assert holder.try_hold(MERCHANT) is not None
        config = write_config(tmp_path, ro_url)
        assert cli.main(["--config", config, *argv]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        for text_shown in shown:
            assert text_shown in out
    finally:
        holder.close()
        store.close()
        admin = create_engine(warehouse_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            for statement in drop:
                conn.execute(text(statement))
        admin.dispose()


# -- the daemon --------------------------------------------------------------------------------


def test_the_daemon_stops_with_exit_2_on_a_schema_it_does_not_know(tmp_path):
    url = f"sqlite:///{tmp_path / 'future.db'}"
    set_revision(url, "0099_future")
    config = tmp_path / "daemon.toml"
    config.write_text(
        'base_url = "http://127.0.0.1:9"\nmerchant_id = "m-1"\n'
        f'secret = "{"s" * 43}"\ndatabase_url = "{url}"\nhttp_port = 0\n'
        'history_from = "2026-01-01T00:00:00Z"\n'
    )
    done = subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "recordsync", "--config", str(config), "run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "0099_future" in line]
    assert len(lines) == 1
    assert "does not know" in lines[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("argv", [["status"], ["migrate"]], ids=["status", "migrate"])
def test_a_sqlite_file_that_is_no_database_is_a_configuration_error(tmp_path, capsys, argv):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    config = write_config(tmp_path, f"sqlite:///{path}")
    assert cli.main(["--config", config, *argv]) == 2
    assert "is not a database" in capsys.readouterr().err

"""A pause has an owner and a reason, and the control commands never migrate (points
3 and 6): another operator's ``resume`` is refused without ``--force`` and says whose pause it
would end; the pause records the database account, which the database vouches for; a schema
behind this version is refused in one line naming ``recordsync migrate``, left as it was."""

from __future__ import annotations

import contextlib
import io
import os
import pwd
import secrets

import pytest

from recordsync import cli
from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import schema_state, upgrade

MERCHANT = "m-owned"
OTHER = "bob@bastion-2 as bob_ops"  # another operator's pause, as the row records it


def write_config(tmp_path, url):
    path = tmp_path / f"recordsync-{secrets.token_hex(3)}.toml"
    path.write_text(f'merchant_id = "{MERCHANT}"\ndatabase_url = "{url}"\n')
    return str(path)


def run(config, *args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["--config", config, "merchant", *args])
    return code, out.getvalue(), err.getvalue()


def database_account(warehouse: Warehouse) -> str | None:
    """The account the test's sessions act as, asked of the database directly."""
    backend = warehouse.engine.dialect.name
    if backend == "sqlite":
        return None
    query = "SELECT current_user" if backend == "postgresql" else "SELECT CURRENT_USER()"
    with warehouse.engine.connect() as conn:
        return str(conn.exec_driver_sql(query).scalar_one())


def test_a_pause_records_its_owner_with_the_database_account(
    warehouse: Warehouse, warehouse_url: str, tmp_path
):
    config = write_config(tmp_path, warehouse_url)
    code, out, err = run(config, "pause", MERCHANT, "--reason", "INC-7")
    assert code == 0, err
    pause = warehouse.controls.paused([MERCHANT])[MERCHANT]
    account = database_account(warehouse)
    if account is None:
        assert " as " not in pause.by
    else:
        assert pause.by.endswith(f" as {account}"), pause.by
    assert pause.reason == "INC-7"
    assert f"by {pause.by}, INC-7): no replica syncs it" in out
    # The owner again: still one pause, since the first time, with the owner's new reason.
    assert run(config, "pause", MERCHANT, "--reason", "INC-8")[0] == 0
    again = warehouse.controls.paused([MERCHANT])[MERCHANT]
    assert (again.since, again.by, again.reason) == (pause.since, pause.by, "INC-8")
    code, out, err = run(config, "resume", MERCHANT)
    assert code == 0, err
    assert out.startswith(f"merchant {MERCHANT} resumed (it was paused since ")
    assert warehouse.controls.paused([MERCHANT]) == {}


def test_the_owner_is_the_user_of_the_uid_whatever_the_environment_says(
    warehouse: Warehouse, warehouse_url: str, tmp_path, monkeypatch
):
    """``$LOGNAME`` and ``$USER`` are whatever the caller sets: a pause recorded by them could
    name anyone, so the owner is the password database's name of the process's uid."""
    monkeypatch.setenv("LOGNAME", "mallory")
    monkeypatch.setenv("USER", "mallory")
    config = write_config(tmp_path, warehouse_url)
    code, _out, err = run(config, "pause", MERCHANT)
    assert code == 0, err
    pause = warehouse.controls.paused([MERCHANT])[MERCHANT]
    assert pause.by.startswith(f"{pwd.getpwuid(os.getuid()).pw_name}@"), pause.by
    assert "mallory" not in pause.by


def test_another_operators_pause_needs_force_to_end_and_keeps_its_reason(
    warehouse: Warehouse, warehouse_url: str, tmp_path
):
    theirs = warehouse.controls.pause(MERCHANT, by=OTHER, reason="platform incident")
    config = write_config(tmp_path, warehouse_url)

    code, out, err = run(config, "pause", MERCHANT, "--reason", "mine")
    assert code == 0, err
    assert f"the pause is {OTHER}'s" in out
    kept = warehouse.controls.paused([MERCHANT])[MERCHANT]
    assert (kept.since, kept.by, kept.reason) == (theirs.since, OTHER, "platform incident")

    code, out, err = run(config, "resume", MERCHANT)
    assert code == 1
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith(f"merchant {MERCHANT} stays paused: the pause is {OTHER}'s")
    assert "platform incident" in lines[0]
    assert "add --force" in lines[0]
    assert "Traceback" not in err
    assert MERCHANT in warehouse.controls.paused([MERCHANT])  # it stands

    code, out, err = run(config, "resume", MERCHANT, "--force")
    assert code == 0, err
    assert out.startswith(f"merchant {MERCHANT} resumed with --force, ending {OTHER}'s pause")
    assert warehouse.controls.paused([MERCHANT]) == {}


@pytest.mark.parametrize("argv", [["pause", MERCHANT], ["resume", MERCHANT]], ids=str)
def test_pause_and_resume_refuse_a_schema_behind_and_never_migrate(
    warehouse_url: str, tmp_path, argv
):
    store = Warehouse.connect(warehouse_url)
    try:
        upgrade(store.engine, "0012")  # a previous version's schema, before merchant_controls
    finally:
        store.close()
    config = write_config(tmp_path, warehouse_url)
    code, out, err = run(config, *argv)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "revision 0012" in lines[0]
    assert "`recordsync migrate`" in lines[0]
    assert out == ""
    store = Warehouse.connect(warehouse_url)
    try:
        with store.engine.connect() as conn:
            assert schema_state(conn).current == "0012"  # not migrated
    finally:
        store.close()

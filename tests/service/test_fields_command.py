"""``recordsync fields list|promote`` as an operator runs them: the real CLI in a process of its
own, on a warehouse whose rows carry members the platform added (written by real page
commits, so the sightings are the ones a sync leaves).

Every case ends with one plain line and the exit code the command documents (0 done, 1 the
warehouse failed, 2 a name or type it cannot take, 128 + the signal that stopped it), no
traceback; ``fields`` needs no
platform settings and sends the platform nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from sqlalchemy import inspect, text
from support.dbfixtures import BACKEND_PARAMS
from support.leftovers import STARTED
from support.synccheck import environment_for, running
from support.warehouse_samples import (
    make_change,
    make_record,
    snapshot_page,
    start_rebuild_of_window,
    tail_page,
)

from recordsync.core.extra_fields import members
from recordsync.core.times import floor_ms, format_time
from recordsync.platform.unknown_members import KNOWN_RECORD_FIELDS
from recordsync.sim import AddedField, SimConfig, Simulator
from recordsync.warehouse import Warehouse

ROWS = 40
CARRYING = ROWS // 2  # rows of each table whose extra_fields has "tax"
FILLED = 2 * (CARRYING - 1)  # both tables, less the one "not a number" of each
UNFIT = 2
DEADLINE = 90.0
TABLES = ("records", "record_revisions")

on_every_backend = pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
on_sqlite = pytest.mark.parametrize(
    "warehouse_url", [param for param in BACKEND_PARAMS if param.id == "sqlite"], indirect=True
)


def _extra(n: int) -> str | None:
    if n % 4 == 0:
        return None  # no unknown member at all
    if n % 4 == 1:
        return '{"channel":"web"}'  # another member only
    if n == 2:  # the one row whose tax is no number
        return '{"tax":"not a number","channel":"app"}'
    return f'{{"tax":1234567890123456789012345.{n:04d},"channel":"app"}}'


def _record(n: int) -> Any:
    return msgspec.structs.replace(make_record(f"r{n:03d}", 1), extra_fields=_extra(n))


@pytest.fixture
def drifted(warehouse: Warehouse) -> tuple[str, datetime, datetime]:
    """A warehouse whose rows carry "tax" and "channel": half written by a snapshot page, the
    other half a moment later by a tail page of another writer (so each field's last sighting
    moved past its first).  Its URL and the wall-clock span the pages were written in."""
    before = datetime.now(UTC)
    start_rebuild_of_window(warehouse)
    snapshot_page(warehouse, *(_record(n) for n in range(ROWS // 2)))
    time.sleep(0.2)
    url = warehouse.engine.url.render_as_string(hide_password=False)
    with closing(Warehouse.connect(url)) as other:
        tail_page(other, *(make_change(_record(n), n) for n in range(ROWS // 2, ROWS)))
    return url, before, datetime.now(UTC)


def _environment(**extra: str) -> dict[str, str]:
    """This process's environment without any recordsync setting, and ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECORDSYNC_")}
    env.update(extra)
    return env


def _config(tmp_path: Path, url: str) -> Path:
    """A config file with the warehouse and nothing else: no merchant, no platform."""
    path = tmp_path / "fields.toml"
    path.write_text(f'database_url = "{url}"\n', encoding="utf-8")
    return path


def _recordsync(
    config: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-m", "recordsync", "--config", str(config), *args],
        env=_environment() if env is None else env,
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done


def _one_line(stream: str) -> str:
    """The stream's only line (it must have exactly one)."""
    lines = stream.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _columns(url: str, table: str) -> set[str]:
    with closing(Warehouse.connect(url)) as store:
        return {column["name"] for column in inspect(store.engine).get_columns(table)}


def _tax_and_extra(url: str, table: str) -> dict[str, tuple[Any, str | None]]:
    with closing(Warehouse.connect(url)) as store, store.engine.connect() as conn:
        # MariaDB's JSON is its LONGTEXT already (and CAST has no TEXT there).
        extra = "extra_fields" if conn.dialect.name == "mysql" else "CAST(extra_fields AS TEXT)"
        rows = conn.execute(text(f"SELECT record_id, tax, {extra} FROM {table}"))
        return {record_id: (tax, extra) for record_id, tax, extra in rows}


def _assert_column_equals_members(url: str) -> None:
    for table in TABLES:
        rows = _tax_and_extra(url, table)
        assert len(rows) == ROWS, table
        for record_id, (tax, extra) in rows.items():
            kept = members(extra).get("tax")
            expected = kept if isinstance(kept, Decimal) else None
            got = None if tax is None else Decimal(str(tax))
            assert got == expected, (table, record_id, tax, extra)


# -- fields list --------------------------------------------------------------------------------


@on_every_backend
def test_list_shows_the_known_fields_and_the_unknown_ones_with_their_sightings(
    drifted: tuple[str, datetime, datetime], tmp_path: Path
) -> None:
    url, before, after = drifted
    config = _config(tmp_path, url)
    done = _recordsync(config, "fields", "list", "--json")
    assert done.returncode == 0, done.stderr
    listed = orjson.loads(done.stdout)
    assert listed["known"] == sorted(KNOWN_RECORD_FIELDS)
    assert listed["promoted"] == []
    assert [row["field"] for row in listed["unknown"]] == ["channel", "tax"]
    for row in listed["unknown"]:
        first = datetime.fromisoformat(row["first_seen_at"])
        last = datetime.fromisoformat(row["last_seen_at"])
        slack = timedelta(seconds=1)  # the database's clock against this one
        assert before - slack <= first < last <= after + slack, row
        assert row["merchants"] == 1

    shown = _recordsync(config, "fields", "list")
    assert shown.returncode == 0, shown.stderr
    assert (
        _one_line(shown.stderr) == f"{len(KNOWN_RECORD_FIELDS)} known, 0 promoted, 2 unknown fields"
    )
    assert "known: bet_amount, created_at" in shown.stdout
    tax_line = next(line for line in shown.stdout.splitlines() if " tax " in line)
    # Each sighting whole, to the second, even on an 80-column pipe.
    for key in ("first_seen_at", "last_seen_at"):
        seen = datetime.fromisoformat(listed["unknown"][1][key])
        assert seen.strftime("%Y-%m-%dT%H:%M:%SZ") in tax_line, tax_line


# -- fields promote ------------------------------------------------------------------------------


@on_every_backend
def test_a_dry_run_counts_the_rows_of_each_table_and_changes_nothing(
    drifted: tuple[str, datetime, datetime], tmp_path: Path
) -> None:
    url, _before, _after = drifted
    done = _recordsync(
        _config(tmp_path, url), "fields", "promote", "tax", "--type", "decimal", "--dry-run"
    )
    assert done.returncode == 0, done.stderr
    line = _one_line(done.stderr)
    assert line.startswith("would add the decimal column tax to records and record_revisions")
    assert f"{CARRYING} rows of records, {CARRYING} rows of record_revisions carry it" in line
    assert done.stdout == ""
    for table in TABLES:
        assert "tax" not in _columns(url, table)
    with closing(Warehouse.connect(url)) as store:
        assert store.fields.list_fields().promoted == []


@on_every_backend
def test_promote_fills_the_column_as_the_members_say_and_running_it_again_changes_nothing(
    drifted: tuple[str, datetime, datetime], tmp_path: Path
) -> None:
    url, _before, _after = drifted
    config = _config(tmp_path, url)
    counts = (
        f"{FILLED} rows of records and record_revisions filled from extra_fields, {UNFIT} did "
        "not fit decimal (left NULL, raw text kept in extra_fields)"
    )
    done = _recordsync(config, "fields", "promote", "tax", "--type", "decimal")
    assert done.returncode == 0, done.stderr
    assert _one_line(done.stderr) == f"promoted tax as decimal: {counts}"
    for table in TABLES:
        assert "tax" in _columns(url, table)
    _assert_column_equals_members(url)
    filled = {table: _tax_and_extra(url, table) for table in TABLES}

    again = _recordsync(config, "fields", "promote", "tax", "--type", "decimal")
    assert again.returncode == 0, again.stderr
    assert (
        _one_line(again.stderr) == f"tax was promoted already as decimal, nothing to do: {counts}"
    )
    assert {table: _tax_and_extra(url, table) for table in TABLES} == filled

    dry = _recordsync(config, "fields", "promote", "tax", "--type", "decimal", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert _one_line(dry.stderr) == (
        "tax is promoted already as decimal (done): running it again changes nothing; "
        f"{CARRYING} rows of records, {CARRYING} rows of record_revisions carry it"
    )

    listed = orjson.loads(_recordsync(config, "fields", "list", "--json").stdout)
    (promoted,) = listed["promoted"]
    assert (promoted["field"], promoted["type"], promoted["state"]) == ("tax", "decimal", "done")
    assert (promoted["rows_filled"], promoted["rows_unfit"]) == (FILLED, UNFIT)
    assert [row["field"] for row in listed["unknown"]] == ["channel"]


def _wait_until_filling(url: str) -> None:
    """Until the field is registered and its columns added: the promotion waits for the
    writers to see it, before it fills."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        with closing(Warehouse.connect(url)) as store:
            states = [row["state"] for row in store.fields.list_fields().promoted]
        if states == ["filling"] and all("tax" in _columns(url, table) for table in TABLES):
            return
        time.sleep(0.05)
    pytest.fail("the promotion never started filling")


@on_every_backend
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_promotion_stopped_by_a_signal_says_so_in_one_line_and_resumes_when_run_again(
    drifted: tuple[str, datetime, datetime], tmp_path: Path, signum: signal.Signals
) -> None:
    url, _before, _after = drifted
    config = _config(tmp_path, url)
    promote = ["fields", "promote", "tax", "--type", "decimal"]
    process = subprocess.Popen(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-m", "recordsync", "--config", str(config), *promote],
        env=_environment(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    STARTED.append(process)
    _wait_until_filling(url)
    process.send_signal(signum)
    out, err = process.communicate(timeout=DEADLINE)
    assert process.returncode == 128 + signum, err
    assert "Traceback" not in out + err, err[-3000:]
    assert _one_line(err) == (
        f"recordsync: interrupted by {signum.name}: run the same command again: the "
        "promotion resumes where it stopped"
    )
    with closing(Warehouse.connect(url)) as store:
        assert [row["state"] for row in store.fields.list_fields().promoted] == ["filling"]

    done = _recordsync(config, "fields", "promote", "tax", "--type", "decimal")
    assert done.returncode == 0, done.stderr
    assert _one_line(done.stderr).startswith(f"promoted tax as decimal: {FILLED} rows of records")
    _assert_column_equals_members(url)


@on_every_backend
def test_promoting_a_field_again_with_another_type_is_refused_in_one_line(
    drifted: tuple[str, datetime, datetime], tmp_path: Path
) -> None:
    url, _before, _after = drifted
    with closing(Warehouse.connect(url)) as store:
        store.promoted_fields.ttl = 0.0  # no writer runs: nothing to wait for
        store.fields.promote_field("tax", "decimal")
    filled = {table: _tax_and_extra(url, table) for table in TABLES}
    for args in ([], ["--dry-run"]):  # the dry run ends as the promotion would
        done = _recordsync(
            _config(tmp_path, url), "fields", "promote", "tax", "--type", "text", *args
        )
        assert done.returncode == 2, done.stderr
        assert _one_line(done.stderr) == (
            "recordsync: configuration: fields promote: tax is promoted already, as decimal"
        )
    assert {table: _tax_and_extra(url, table) for table in TABLES} == filled


@on_sqlite
@pytest.mark.parametrize(
    ("name", "kind", "said"),
    [
        ("Tax", "decimal", "must be lower-case letters, digits and _"),
        ("currency", "text", "'currency' is a column of records already"),
        ("tax;drop", "decimal", "must be lower-case letters, digits and _"),
        ("tax", "float", "argument --type: invalid choice: 'float'"),
    ],
    ids=["upper-case", "a-column-already", "not-a-column-name", "unknown-type"],
)
def test_a_name_or_type_it_cannot_take_ends_with_exit_2_and_changes_nothing(
    drifted: tuple[str, datetime, datetime], tmp_path: Path, name: str, kind: str, said: str
) -> None:
    url, _before, _after = drifted
    columns = {table: _columns(url, table) for table in TABLES}
    done = _recordsync(_config(tmp_path, url), "fields", "promote", name, "--type", kind)
    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    assert said in last, done.stderr
    if kind != "float":  # argparse shows its usage above its line; ours is the only one
        assert _one_line(done.stderr).startswith("recordsync: configuration: fields promote: ")
    assert {table: _columns(url, table) for table in TABLES} == columns


@on_sqlite
def test_a_field_no_page_has_carried_is_refused_unless_unseen_is_given(
    drifted: tuple[str, datetime, datetime], tmp_path: Path
) -> None:
    url, _before, _after = drifted
    config = _config(tmp_path, url)
    columns = {table: _columns(url, table) for table in TABLES}
    said = (
        "no page has carried tax_amout yet (fields list shows the fields seen); "
        "--unseen promotes it before it arrives"
    )
    done = _recordsync(config, "fields", "promote", "tax_amout", "--type", "decimal")
    assert done.returncode == 2, done.stderr
    assert _one_line(done.stderr) == f"recordsync: configuration: fields promote: {said}"
    assert {table: _columns(url, table) for table in TABLES} == columns
    dry = _recordsync(config, "fields", "promote", "tax_amout", "--type", "decimal", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert _one_line(dry.stderr).endswith(f"0 rows of record_revisions carry it; but {said}")
    done = _recordsync(config, "fields", "promote", "tax_amout", "--type", "decimal", "--unseen")
    assert done.returncode == 0, done.stderr
    assert all("tax_amout" in _columns(url, table) for table in TABLES)


# -- the warehouse cannot be used -----------------------------------------------------------------

UNREACHABLE = [
    pytest.param("postgresql+psycopg://postgres@127.0.0.1:9/test", id="postgres"),
    pytest.param("mysql+pymysql://root@127.0.0.1:9/test", id="mariadb"),
]
FIELDS_COMMANDS = [
    pytest.param(["list"], id="list"),
    pytest.param(["list", "--json"], id="list-json"),
    pytest.param(["promote", "tax", "--type", "decimal", "--dry-run"], id="dry-run"),
    pytest.param(["promote", "tax", "--type", "decimal"], id="promote"),
]


@pytest.mark.parametrize("url", UNREACHABLE)
@pytest.mark.parametrize("argv", FIELDS_COMMANDS)
def test_an_unreachable_warehouse_ends_with_exit_1_in_one_line(
    tmp_path: Path, url: str, argv: list[str]
) -> None:
    done = _recordsync(_config(tmp_path, url), "fields", *argv)
    assert done.returncode == 1, done.stderr
    assert _one_line(done.stderr).startswith("recordsync: error: warehouse unavailable")
    assert done.stdout == ""


@pytest.mark.parametrize("argv", FIELDS_COMMANDS)
def test_a_warehouse_never_migrated_is_refused_naming_migrate_and_left_untouched(
    tmp_path: Path, argv: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    store = Warehouse.connect(url)
    store.ping()  # connected once: SQLite's file now exists, empty
    store.close()
    done = _recordsync(_config(tmp_path, url), "fields", *argv)
    assert done.returncode == 2, done.stderr
    line = _one_line(done.stderr)
    assert "never migrated" in line
    assert "recordsync migrate" in line
    with closing(Warehouse.connect(url)) as store:
        assert inspect(store.engine).get_table_names() == []


@pytest.mark.parametrize("argv", [param for param in FIELDS_COMMANDS if param.id != "promote"])
def test_the_reads_on_a_sqlite_file_that_is_not_there_name_it_and_create_nothing(
    tmp_path: Path, argv: list[str]
) -> None:
    path = tmp_path / "typo.db"
    done = _recordsync(_config(tmp_path, f"sqlite:///{path}"), "fields", *argv)
    assert done.returncode == 2, done.stderr
    assert _one_line(done.stderr).startswith(f"recordsync: configuration: no warehouse at {path}")
    assert not path.exists()


# -- the platform is never asked ------------------------------------------------------------------


@on_sqlite
def test_fields_runs_with_no_platform_setting_at_all(
    drifted: tuple[str, datetime, datetime], tmp_path: Path
) -> None:
    url, _before, _after = drifted
    config = _config(tmp_path, url)  # the database URL alone
    env = _environment()
    assert not [key for key in env if key.startswith("RECORDSYNC_")]
    listed = _recordsync(config, "fields", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    done = _recordsync(config, "fields", "promote", "tax", "--type", "decimal", env=env)
    assert done.returncode == 0, done.stderr
    assert _one_line(done.stderr).startswith(f"promoted tax as decimal: {FILLED} rows of records")


MERCHANT = "m-fields"
SECRET = "fields-secret-0123456789-abcdefghijklmnopq"


SIM = SimConfig(
    merchant_id="m-fields",
    secret="fields-secret-0123456789-abcdefghijklmnopq",
    seed=31,
    history_days=0.5,
    rounds_per_day=400,
    record_requests=1000,
    added_fields=(AddedField("tax", "decimal"),),
)


def test_fields_sends_no_request_to_a_configured_platform(tmp_path: Path) -> None:
    with running(SIM) as sim:
        _sync_then_fields(sim, tmp_path)


def _sync_then_fields(sim: Simulator, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'synced.db'}"
    env = _environment(**environment_for(sim, url))
    config = tmp_path / "empty.toml"
    config.write_text("", encoding="utf-8")
    end = floor_ms(sim.now())
    synced = _recordsync(
        config,
        "backfill",
        "--from",
        format_time(end - timedelta(days=1)),
        "--to",
        format_time(end),
        env=env,
    )
    assert synced.returncode == 0, synced.stderr[-3000:]
    asked = sim.stats().total_requests
    assert asked > 0  # the simulator counts what this process's children send it
    for argv in (
        ["list"],
        ["promote", "tax", "--type", "decimal", "--dry-run"],
        ["promote", "tax", "--type", "decimal"],
    ):
        done = _recordsync(config, "fields", *argv, env=env)
        assert done.returncode == 0, done.stderr
    assert "and record_revisions filled from extra_fields" in done.stderr
    assert sim.stats().total_requests == asked

"""``recordsync status``: each value once, the jobs and the quarantine as tables; ``--json``
keeps the whole structure for scripts; every merchant names the replica holding it."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from sqlalchemy import select
from support.pages import commit_window_page
from support.synccheck import environment_for, start_daemon
from support.warehouse_samples import make_record

from recordsync import cli
from recordsync.core.models import RejectedItem
from recordsync.core.state import REBUILD_JOB, Window
from recordsync.service.commands.status import rows_text
from recordsync.sim import SimConfig, running_simulator
from recordsync.warehouse import Warehouse, WarehouseStatus, schema

MERCHANT = "m-status"
T0 = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture
def config(tmp_path):
    """A warehouse with a rebuild half done and one quarantined item, and a config naming it."""
    url = f"sqlite:///{tmp_path / 'status.db'}"
    store = Warehouse.connect(url)
    try:
        store.migrate()
        windows = [
            Window(T0 - timedelta(days=2), T0 - timedelta(days=1)),
            Window(T0 - timedelta(days=1), T0),
        ]
        store.state.start_rebuild(
            MERCHANT,
            change_cursor="c0",
            anchor_at=T0,
            history_from=windows[0].start,
            snapshot_to=T0,
            windows=windows,
        )
        commit_window_page(
            store,
            MERCHANT,
            REBUILD_JOB,
            windows[0],
            records=[],
            rejected=[
                RejectedItem(position=0, raw=b'{"x": 1}', reason="bad money", record_id="r-9")
            ],
            next_cursor=None,
            cursor_issued_at=None,
            done=True,
            position="first",
        )
    finally:
        store.close()
    path = tmp_path / "recordsync.toml"
    path.write_text(f'merchant_id = "{MERCHANT}"\ndatabase_url = "{url}"\n')
    return path


def test_status_shows_each_value_once_and_the_jobs_as_a_table(config, capsys):
    assert cli.main(["--config", str(config), "status"]) == 0
    out = capsys.readouterr().out
    assert out.count(MERCHANT) == 1
    assert "[{" not in out  # no Python reprs of lists or dicts
    assert "'job'" not in out
    job_line = next(line for line in out.splitlines() if f"│ {REBUILD_JOB} " in line)
    assert "1/2" in job_line
    assert "50%" in job_line
    quarantine_line = next(line for line in out.splitlines() if "r-9" in line)
    assert "bad money" in quarantine_line
    assert "snapshot" in next(line for line in out.splitlines() if "phase" in line)


def test_status_shows_a_pause_with_who_and_why(config, capsys):
    url = config.read_text().split('database_url = "')[1].split('"')[0]
    store = Warehouse.connect(url)
    try:
        store.controls.pause(MERCHANT, by="ops@host-1", reason="contract on hold")
    finally:
        store.close()
    assert cli.main(["--config", str(config), "status"]) == 0
    words = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the table may wrap
    assert "paused since 20" in words
    assert "by ops@host-1: contract on hold" in words
    assert "held by nobody (paused)" in words


def test_status_json_keeps_the_whole_structure(config, capsys):
    assert cli.main(["--config", str(config), "status", "--json"]) == 0
    (report,) = orjson.loads(capsys.readouterr().out)["merchants"]
    assert report["merchant_id"] == MERCHANT
    assert report["status"]["merchant_id"] == MERCHANT
    assert report["status"]["state"]["phase"] == "snapshot"
    assert report["status"]["jobs"] == [
        {"job": REBUILD_JOB, "windows_done": 1, "windows_total": 2, "records": 0}
    ]
    assert report["status"]["quarantined"] == 1
    assert report["quarantined"][0]["record_id"] == "r-9"


def test_status_of_a_merchant_never_synced_says_so(config, capsys, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(config.read_text().replace(MERCHANT, "m-new"))
    assert cli.main(["--config", str(other), "status"]) == 0
    out = capsys.readouterr().out
    assert "not started" in out
    assert "snapshot jobs" not in out


@pytest.fixture
def fleet(config, tmp_path):
    """The same warehouse, configured with two merchants: the half-built one and a new one."""
    url = next(line for line in config.read_text().splitlines() if line.startswith("database_url"))
    path = tmp_path / "fleet.toml"
    path.write_text(
        f'{url}\n[[merchants]]\nmerchant_id = "{MERCHANT}"\n[[merchants]]\nmerchant_id = "m-new"\n'
    )
    return path


def test_status_shows_a_block_for_every_configured_merchant(fleet, capsys):
    assert cli.main(["status", "--config", str(fleet)]) == 0
    out = capsys.readouterr().out
    first, second = out.split("recordsync status: ")[1:]
    assert first.startswith(MERCHANT)
    assert "snapshot" in next(line for line in first.splitlines() if "phase" in line)
    assert second.startswith("m-new")
    assert "not started" in second


def test_status_json_lists_every_merchant_in_configured_order(fleet, capsys):
    assert cli.main(["status", "--json", "--config", str(fleet)]) == 0
    merchants = orjson.loads(capsys.readouterr().out)["merchants"]
    assert [merchant["merchant_id"] for merchant in merchants] == [MERCHANT, "m-new"]
    assert merchants[0]["status"]["jobs"][0]["windows_done"] == 1
    assert merchants[0]["quarantined"][0]["record_id"] == "r-9"
    assert merchants[1]["status"]["state"] is None
    assert merchants[1]["quarantined"] == []


def test_status_check_is_ready_only_when_every_merchant_is(fleet, capsys):
    assert cli.main(["status", "--check", "--config", str(fleet)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in lines] == [MERCHANT, "m-new"]
    assert lines[1].startswith("m-new: not ready")


# -- who holds each merchant ---------------------------------------------------------------------


def _value(out, label):
    """The value beside ``label`` in the facts table of ``status``."""
    line = next(line for line in out.splitlines() if f"│ {label} " in line)
    return line.split("│")[2].strip()


def test_status_names_the_holder_its_epoch_and_the_freshness(config, tmp_path, capsys):
    store = Warehouse.connect(f"sqlite:///{tmp_path / 'status.db'}")
    session = store.fleet_session("host-a-1234-beef")
    try:
        epoch = session.try_hold(MERCHANT)
        assert epoch is not None
        assert cli.main(["--config", str(config), "status"]) == 0
        out = capsys.readouterr().out
        assert _value(out, "held by") == "host-a-1234-beef"
        assert _value(out, "lease epoch") == str(epoch)
        assert _value(out, "data age (platform time)").startswith("none yet")
        assert _value(out, "since last commit").endswith(" s")
        assert cli.main(["--config", str(config), "status", "--json"]) == 0
        (report,) = orjson.loads(capsys.readouterr().out)["merchants"]
        assert report["holder"] == "host-a-1234-beef"
        assert report["epoch"] == epoch
        assert report["freshness"]["staleness_seconds"] is None  # no change page yet
        assert report["freshness"]["seconds_since_commit"] >= 0
    finally:
        session.close()
        store.close()


def test_a_merchant_never_held_or_built_has_null_holder_epoch_and_freshness(config, capsys):
    other = config.parent / "never.toml"
    other.write_text(config.read_text().replace(MERCHANT, "m-never"))
    assert cli.main(["--config", str(other), "status", "--json"]) == 0
    (report,) = orjson.loads(capsys.readouterr().out)["merchants"]
    assert (report["holder"], report["epoch"], report["freshness"]) == (None, None, None)
    assert cli.main(["--config", str(other), "status"]) == 0
    out = capsys.readouterr().out
    assert _value(out, "held by").startswith("nobody")
    assert _value(out, "lease epoch") == "never held by a replica"


def _fleet_rows(url):
    """Every row of the fleet's tables (leases and replicas)."""
    store = Warehouse.connect(url)
    try:
        with store.engine.connect() as conn:
            return [
                sorted(tuple(row) for row in conn.execute(select(table)))
                for table in (schema.merchant_leases, schema.replicas)
            ]
    finally:
        store.close()


def _status_json(config):
    """``status --json`` in a process of its own, as an operator runs it beside the daemon."""
    done = subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "recordsync", "--config", str(config), "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (report,) = orjson.loads(done.stdout)["merchants"]
    return report


def _lease_acquired(log):
    """The replica id and epoch of the daemon's ``lease_acquired`` event, once logged."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines() if log.exists() else []:
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "lease_acquired":
                return event["replica_id"], event["epoch"]
        time.sleep(0.1)
    raise AssertionError(f"the daemon never took the merchant: {log.read_text()[-2000:]}")


# A small platform: the daemon takes the merchant within a second or two.
HELD = SimConfig(
    merchant_id="m-held",
    secret="held-secret-0123456789abcdefghijklmnopqrst",
    seed=5,
    history_days=0.2,
    rounds_per_day=200,
    record_requests=50,
)


@pytest.mark.slow
def test_a_running_daemon_is_named_as_holder_and_null_once_killed(warehouse_url, tmp_path):
    """A real daemon on each backend: ``status --json`` names it; after kill -9 (its lease row
    never released) nobody holds the merchant, since the lock went with the process.  A
    status run writes nothing to the fleet's tables."""
    config = tmp_path / "status.toml"
    config.write_text(f'merchant_id = "{HELD.merchant_id}"\ndatabase_url = "{warehouse_url}"\n')
    log = tmp_path / "daemon.log"
    with running_simulator(HELD) as sim:
        daemon = start_daemon(environment_for(sim, warehouse_url), log)
        try:
            replica, epoch = _lease_acquired(log)
            report = _status_json(config)
            assert (report["holder"], report["epoch"]) == (replica, epoch)
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(timeout=10)
            deadline = time.monotonic() + 10
            while (report := _status_json(config))["holder"] is not None:
                assert time.monotonic() < deadline, f"still held after kill -9: {report['holder']}"
                time.sleep(0.2)
            assert report["epoch"] == epoch  # nobody took it since
            rows = _fleet_rows(warehouse_url)
            assert [lease[:2] for lease in rows[0]] == [(HELD.merchant_id, epoch)]
            _status_json(config)
            assert _fleet_rows(warehouse_url) == rows
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()


def test_status_says_why_a_drift_check_is_overdue(config, capsys):
    """Deferred behind a backfill for hours (the holder noted it), the check is overdue and
    ``status`` says why; once it runs, the line says when it last ran."""
    url = config.read_text().split('database_url = "')[1].split('"')[0]
    store = Warehouse.connect(url)
    try:
        store.state.note_drift_check(MERCHANT, deferred=False, epoch=None)
        store.state.note_drift_check(MERCHANT, deferred=True, epoch=None)
        with store.engine.begin() as conn:  # as if it ran 3 h ago, deferred since 2 h ago
            run = store.state.drift_check_run(MERCHANT)
            assert run is not None
            conn.execute(
                schema.drift_checks.update().values(
                    last_run_at=run.read_at - timedelta(hours=3),
                    deferred_since=run.read_at - timedelta(hours=2),
                )
            )
    finally:
        store.close()
    assert cli.main(["--config", str(config), "status"]) == 0
    words = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "drift check OVERDUE: last ran 20" in words
    assert "every 3600 s; deferred behind the sync's own reads (a snapshot, a backfill)" in words
    assert cli.main(["--config", str(config), "status", "--json"]) == 0
    (report,) = orjson.loads(capsys.readouterr().out)["merchants"]
    assert report["drift_check"]["overdue"] is True
    assert report["drift_check"]["interval_seconds"] == 3600.0

    store = Warehouse.connect(url)
    try:
        store.state.note_drift_check(MERCHANT, deferred=False, epoch=None)
    finally:
        store.close()
    assert cli.main(["--config", str(config), "status"]) == 0
    words = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "OVERDUE" not in words
    assert "drift check last ran 20" in words


def test_a_count_past_the_cap_is_shown_as_more_than():
    """A merchant with more rows than ``status`` counts is shown as "more than" the cap,
    never as an exact figure it did not count."""
    report = WarehouseStatus(
        MERCHANT, None, (), records=100_000, quarantined=0, records_exact=False
    )
    assert rows_text(report) == "more than 100,000"
    assert rows_text(dataclasses.replace(report, records_exact=True)) == "100,000"


FIRST_ID = "0092fad3-1b7e-48a7-9c1d-5f0e4b2a7c31"  # a platform's record ids are UUIDs


def test_status_lists_the_unknown_record_fields_with_first_and_last_sighting(
    config, capsys, tmp_path
):
    url = f"sqlite:///{tmp_path / 'status.db'}"
    store = Warehouse.connect(url)
    try:
        commit_window_page(
            store,
            MERCHANT,
            REBUILD_JOB,
            Window(T0 - timedelta(days=1), T0),
            records=[make_record(FIRST_ID, extra_fields='{"tax_amount":"0.25"}')],
            rejected=[],
            next_cursor="n1",
            cursor_issued_at=T0,
            done=False,
            position="first",
        )
        commit_window_page(
            store,
            MERCHANT,
            REBUILD_JOB,
            Window(T0 - timedelta(days=1), T0),
            records=[make_record("r-8", extra_fields='{"tax_amount":"0.5"}')],
            rejected=[],
            next_cursor="n2",
            cursor_issued_at=T0,
            done=False,
            position="n1",
        )
    finally:
        store.close()
    assert cli.main(["--config", str(config), "status"]) == 0
    out = capsys.readouterr().out.splitlines()  # an 80-column pipe: every part shown whole
    at = next(n for n, line in enumerate(out) if "tax_amount" in line)
    assert "…" not in "".join(out[at - 3 : at + 3])
    rows = [line for line in out[at : at + 4] if line.startswith("│")]
    assert "".join(line.split("│")[-2].strip() for line in rows) == FIRST_ID
    assert cli.main(["--config", str(config), "status", "--json"]) == 0
    (seen,) = json.loads(capsys.readouterr().out)["merchants"][0]["unknown_fields"]
    assert seen["field"] == "tax_amount"
    assert seen["first_record_id"] == FIRST_ID
    assert seen["first_seen_at"] <= seen["last_seen_at"]

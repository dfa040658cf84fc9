"""``recordsync status``: each value once, the jobs and the quarantine as tables; ``--json``
keeps the whole structure for scripts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from recordsync import cli
from recordsync.core.models import RejectedItem
from recordsync.core.state import REBUILD_JOB, Window
from recordsync.warehouse import Warehouse

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
        store.start_rebuild(
            MERCHANT,
            change_cursor="c0",
            anchor_at=T0,
            history_from=windows[0].start,
            snapshot_to=T0,
            windows=windows,
        )
        store.commit_window_page(
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

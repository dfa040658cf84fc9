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
    report = orjson.loads(capsys.readouterr().out)
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
